"""`gradfuse.einsum` (einsum.py) against PyTorch's float64: results and gradients of
each operand, on reference and c, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
from gradfuse import Parameter, Receiver, execute
from gradfuse.diagnostics import GradfuseError

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),  # bilinear: three operands
    ("ii", [(4, 4)]),  # trace
    ("ii->i", [(4, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("...ij,...j", [(2, 3, 4), (4,)]),  # implicit output; ... broadcasts
    ("...ii->...i", [(2, 3, 3)]),
    ("...ij->ij", [(2, 3, 3)]),  # ... summed
    ("i,j", [(2,), (3,)]),  # outer product
    ("i,i->", [(5,), (5,)]),
    ("ij->ji", [(3, 4)]),
    ("ji", [(3, 4)]),  # implicit: letters in order, a transpose
    ("ijk->", [(2, 3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,j->i", [(2, 3), (1,)]),  # a size 1 broadcasts
]


def _einsum(backend: str, equation: str, xs: list[np.ndarray], weight: np.ndarray) -> list:
    gradfuse.reset()
    params = [Parameter(x.copy(), name=f"p{k}") for k, x in enumerate(xs)]
    y = gradfuse.einsum(equation, *params)
    (y * gradfuse.tensor(weight)).sum().backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [y, *[p.grad for p in params]])
    execute(backend=backend)
    return got


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize(("equation", "shapes"), CASES)
def test_einsum_is_pytorchs(backend: str, equation: str, shapes: list) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(equation))
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    want = torch.einsum(equation, *ts)
    weight = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(weight, dtype=torch.float64)).sum().backward()
    y, *grads = _einsum(backend, equation, xs, weight)
    # float32 against float64 (2026-12-07, reference and c): within 7.2e-7 absolute at
    # most (bn,anm,bm->ba), for sums of up to 15 products of 3 N(0, 1) factors; 1e-5
    # leaves 14x, and the rounding bound (15 eps, times sums of |terms| below 400) is
    # 3.6e-4, far above either.
    assert y.shape == tuple(want.shape)
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    for grad, t in zip(grads, ts, strict=True):
        np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_pair_is_one_dot_and_operands_may_come_as_a_list() -> None:
    gradfuse.reset()
    q = Parameter(np.ones((2, 3, 4, 5), np.float32), name="q")
    k = Parameter(np.ones((2, 3, 6, 5), np.float32), name="k")
    y = gradfuse.einsum("bhqd,bhkd->bhqk", [q, k])
    assert y.shape == (2, 3, 4, 6)
    text = gradfuse.ir_text()
    assert text.count("tg.dot") == 1 and text.count("tg.permute") == 1


@pytest.mark.parametrize(
    ("equation", "message"),
    [
        ("ij,jk,kl->il", "names 3 operands, got 2"),
        ("ijk,jk->ik", "'ijk' labels 3 dims of a tensor of rank 2"),
        ("i1,jk", "'i1' in 'i1,jk': labels are letters and one ..."),
        ("ij,jk->iz", "the result's label 'z' is on no operand"),
        ("ij,jk->ii", "the result's label 'i' repeats"),
        ("ij,kj->ik", "label 'j' has sizes 4 and 5"),
    ],
)
def test_bad_equations_are_one_error(equation: str, message: str) -> None:
    gradfuse.reset()
    a = Parameter(np.ones((3, 4), np.float32), name="a")
    b = Parameter(np.ones((4, 5), np.float32), name="b")
    with pytest.raises(GradfuseError, match=message.replace("(", r"\(").replace(".", r"\.")):
        gradfuse.einsum(equation, a, b)
