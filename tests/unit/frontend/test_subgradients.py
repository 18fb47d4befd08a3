"""Where PyTorch's results and gradients are defined by convention, gradfuse's are the
same (found by a census of PyTorch idioms): `abs` and the 1-norm have gradient 0 at 0,
a zero vector's 2-norm (and `F.normalize` of it) a finite gradient, not NaN; integer
dtypes given to creation functions truncate; `F.embedding`'s other arguments are
errors, not ignored."""

from __future__ import annotations

import gradfuse.nn.functional as F
import numpy as np
import pytest

import gradfuse
from gradfuse import Parameter, Receiver, execute
from gradfuse.diagnostics import GradfuseError

X = np.array([[0.0, 0.0, -0.0], [3.0, -4.0, 0.0], [-1.5, 0.0, 2.0]], np.float32)
W = np.array([[1.5, -2.0, 0.5], [0.5, 1.0, -1.0], [1.0, 2.0, -3.0]], np.float32)


def losses(torch, x, w):  # noqa: ANN001, ANN201 (either library's tensors)
    """Each of the conventions in one loss."""
    abs_part = (x.abs() * w).sum()
    norms = x.norm(dim=1).sum() + x.norm(p=1, dim=1).sum()
    normalized = (F.normalize(x, dim=1) if torch.__name__ == "gradfuse" else torch.nn.functional.normalize(x, dim=1))  # fmt: skip
    return abs_part + norms + (normalized * w).sum(), [x.abs(), x.norm(dim=1)]


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_zero_has_pytorchs_gradients(backend: str) -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    p = Parameter(X.copy(), name="p")
    loss, outs = losses(gradfuse, p, gradfuse.tensor(W))
    loss.backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [*outs, p.grad])
    execute(backend=backend)
    t = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    want_loss, want_outs = losses(torch, t, torch.tensor(W, dtype=torch.float64))
    want_loss.backward()
    np.testing.assert_array_equal(got[0], np.abs(X))  # (+0 for -0, as PyTorch's)
    assert not np.signbit(got[0]).any()
    np.testing.assert_allclose(got[1], want_outs[1].detach().numpy(), rtol=1e-6)
    assert np.isfinite(got[2]).all()
    # float32 against float64 (2026-12-07, reference and c): each row within 9.3e-8 of
    # its largest gradient (the zero row's is 1e12 times W's, F.normalize's 1/eps);
    # 1e-6 leaves 10x
    scale = np.abs(t.grad.numpy()).max(axis=1, keepdims=True)
    np.testing.assert_allclose(got[2] / scale, t.grad.numpy() / scale, rtol=0, atol=1e-6)


def test_integer_dtypes_truncate_and_embedding_refuses_what_it_cannot_do() -> None:
    gradfuse.reset()
    got: list[np.ndarray] = []
    made = [
        gradfuse.tensor([[-7.5, 2.7]], dtype=gradfuse.long),
        gradfuse.full((2,), -2.7, dtype=gradfuse.int64),
        gradfuse.arange(0.0, 2.0, 0.75, dtype=gradfuse.int32),
    ]
    Receiver(lambda *v: got.extend(v), made)
    execute(backend="reference")
    np.testing.assert_array_equal(got[0], [[-7.0, 2.0]])  # PyTorch's, toward zero
    np.testing.assert_array_equal(got[1], [-2.0, -2.0])
    np.testing.assert_array_equal(got[2], [0.0, 0.0, 1.0])
    table = gradfuse.tensor(np.ones((4, 3), np.float32))
    ids = gradfuse.tensor([0.0, 2.0])
    for option in ({"max_norm": 1.0}, {"scale_grad_by_freq": True}, {"sparse": True}):
        with pytest.raises(GradfuseError, match=f"embedding: {next(iter(option))}="):
            F.embedding(ids, table, **option)


@pytest.mark.parametrize(("backend", "dtype"), [("reference", None), ("c", None), ("reference", np.float64)])  # fmt: skip
def test_rounding_holds_in_float64_runs_too(backend: str, dtype) -> None:  # noqa: ANN001
    x = np.array([-7.5, -1.25, 0.5, 1.5, 2.5, -0.5, -2.5, 3.7, 8388607.5, 1e9, np.inf, np.nan])
    x = x.astype(np.float32)
    gradfuse.reset()
    p = Parameter(x.copy(), name="p")
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [p.round(), p.floor(), p.ceil(), p.trunc(), p.long()])
    execute(backend=backend, dtype=dtype)  # (float64: the program's float32 run in float64)
    for g, want in zip(got, [np.round(x), np.floor(x), np.ceil(x), np.trunc(x), np.trunc(x)], strict=True):  # fmt: skip
        np.testing.assert_array_equal(g, want)
