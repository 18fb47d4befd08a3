"""`cumsum`, `flip` and `roll` (tensor_cumulative.py) against PyTorch's float64: values
(an infinity where PyTorch's is), and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
from gradfuse import Parameter, Receiver, Tensor, execute

X = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
X[1, 2] = np.inf  # stays in its row's sums from there on, as PyTorch's
W = np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)


def outputs(torch, x):  # noqa: ANN001, ANN201 (either library's tensors)
    return [
        x.cumsum(1), torch.cumsum(x, 0), x.flip(1), torch.flip(x, (0, 1)), x.roll(2, 1),
        torch.roll(x, -1), x.roll((1, 3), (0, 1)),
    ]  # fmt: skip


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_cumsum_flip_and_roll_are_pytorchs(backend: str) -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    p = Parameter(X.copy(), name="p")
    outs: list[Tensor] = outputs(gradfuse, p)
    finite = gradfuse.tensor(np.isfinite(X).astype(np.float32))
    sum(((o * gradfuse.tensor(W)) * finite).sum() for o in outs[2:]).backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [*outs, p.grad])
    execute(backend=backend)
    t = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    want = outputs(torch, t)
    mask = torch.tensor(np.isfinite(X), dtype=torch.float64)
    sum(((o * torch.tensor(W, dtype=torch.float64)) * mask).sum() for o in want[2:]).backward()
    # cumsum in any grouping: within (n - 1) float32 units of the sum of |x| so far
    # (the summation bound; measured 2026-12-07: 2.2e-7 at most, n = 7)
    for g, w, dim in ((got[0], want[0], 1), (got[1], want[1], 0)):
        w = w.detach().numpy()
        assert np.array_equal(np.isinf(g), np.isinf(w))
        bound = (X.shape[dim] - 1) * 2.0**-24 * np.cumsum(np.abs(X.astype(np.float64)), dim)
        ok = np.isinf(w) | (np.abs(g - np.where(np.isinf(w), 0, w)) <= bound + 1e-30)
        assert ok.all()
    for g, w in zip(got[2:-1], want[2:], strict=True):
        np.testing.assert_array_equal(g, w.detach().numpy())  # moves: exact
    # each gradient a float32 sum of 5 of W's entries (|W| < 3): within 4 units of 2^-24
    # times 15, 3.6e-6 (measured 2026-12-07: 2.2e-7)
    np.testing.assert_allclose(got[-1], t.grad.numpy(), rtol=0, atol=3.6e-6)
