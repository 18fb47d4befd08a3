"""`x[key] = value` (tensor_index.py) against PyTorch: slices, ints, ..., masks, the
gradients of both sides, word_language_model's PositionalEncoding as written, and
its errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradfuse
from gradfuse import Parameter, Receiver, execute
from gradfuse.diagnostics import GradfuseError

X = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
V = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
W = np.arange(24, dtype=np.float32).reshape(4, 6)


def assign_all(y, v, value_tensor):  # noqa: ANN001, ANN201 (both sides' tensors)
    y[:, 0::2] = v * 2.0
    y[1] = 7.0
    y[..., -1] = v[:, 0]
    y[y > 1.5] = 0.0
    y[2:, None, 1:3] = value_tensor  # a [1, 2] value broadcast to [2, 1, 2]
    return y


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_assignments_and_their_gradients_are_pytorchs(backend: str) -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    p, v = Parameter(X.copy(), name="p"), Parameter(V.copy(), name="v")
    y = assign_all(p * 1.0, v, gradfuse.tensor([[-3.0, -4.0]]))
    (y * gradfuse.tensor(W)).sum().backward()
    got: list[np.ndarray] = []
    Receiver(lambda *a: got.extend(a), [y, p.grad, v.grad])
    execute(backend=backend)
    tp = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    tv = torch.tensor(V, dtype=torch.float64, requires_grad=True)
    ty = assign_all(tp * 1.0, tv, torch.tensor([[-3.0, -4.0]], dtype=torch.float64))
    (ty * torch.tensor(W, dtype=torch.float64)).sum().backward()
    # every value is a copy of an input, a product by 2 or a constant, and every
    # gradient a copy of W or 2 W: exact in float32
    np.testing.assert_array_equal(got[0], ty.detach().numpy().astype(np.float32))
    np.testing.assert_array_equal(got[1], tp.grad.numpy())
    np.testing.assert_array_equal(got[2], tv.grad.numpy())


def positional_encoding(torch):  # noqa: ANN001, ANN201
    """word_language_model's PositionalEncoding (model.py) on `torch`'s nn.Module, as
    written there (dropout left out)."""

    class PositionalEncoding(torch.nn.Module):
        def __init__(self, d_model: int, max_len: int = 5000) -> None:
            super().__init__()
            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(
                torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
            )
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer("pe", pe)

    return PositionalEncoding


def test_word_language_models_positional_table_is_pytorchs() -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    table = positional_encoding(gradfuse)(16, 50).pe.host
    torch.set_default_dtype(torch.float64)
    try:
        want = positional_encoding(torch)(16, 50).pe.numpy()
    finally:
        torch.set_default_dtype(torch.float32)
    assert table.shape == want.shape == (50, 1, 16)
    # float32 sin/cos of arguments up to 49 rad against float64 (2026-12-07): within
    # 6.6e-7. The bound is the argument's error: the product's rounding (half an ulp
    # of 49, 1.9e-6) and div_term's (an ulp of exp, 6e-8 relative, times 49: 2.9e-6)
    np.testing.assert_allclose(table, want, rtol=0, atol=5e-6)


def test_a_parameter_takes_an_assignment_under_no_grad_only() -> None:
    gradfuse.reset()
    p = Parameter(np.ones((2, 3), np.float32), name="p")
    with pytest.raises(GradfuseError, match="updated in place while gradients are recorded"):
        p[0] = 0.0
    with gradfuse.no_grad():
        p[0, 1:] = 5.0
    got: list[np.ndarray] = []
    Receiver(lambda v: got.append(v), p * 1.0)
    execute(backend="reference")
    np.testing.assert_array_equal(got[0], [[1.0, 5.0, 5.0], [1.0, 1.0, 1.0]])


@pytest.mark.parametrize(
    ("assign", "message"),
    [
        (lambda y, p: y.__setitem__(slice(None, None, -1), 0.0), "step must be positive"),
        (lambda y, p: y.__setitem__(5, 0.0), "index 5 is out of bounds"),
        (lambda y, p: y.__setitem__(gradfuse.tensor([0.0, 1.0]), 0.0), "the key may be ints"),
        (lambda y, p: y.__setitem__(y[0] > 0.0, 0.0), "does not cover the leading dims"),
        (lambda y, p: y.__setitem__(y > 0.0, p), "a number or a one-element tensor"),
        (lambda y, p: y.__setitem__(0, p), "cannot be broadcast|broadcast"),
    ],
)
def test_bad_assignments_are_one_error(assign, message: str) -> None:  # noqa: ANN001
    gradfuse.reset()
    p = Parameter(np.ones((4, 6), np.float32), name="p")
    y = p * 1.0
    with pytest.raises(GradfuseError, match=message):
        assign(y, p)


def test_results_of_data_dependent_shape_are_one_error() -> None:
    gradfuse.reset()
    x = gradfuse.tensor([1.0, -2.0, 3.0])
    for call in (lambda: x.masked_select(x > 0), lambda: gradfuse.nonzero(x), lambda: x[x > 0]):
        with pytest.raises(GradfuseError, match=r"gradfuse.where\(mask, x, 0.0\)"):
            call()
