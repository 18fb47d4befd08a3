"""`topk`, tensor exponents, `mT` and `x[arange(n), target]` (tensor_reduce.py,
tensor_methods.py) against PyTorch's float64: values, indices, gradients."""

from __future__ import annotations

import numpy as np
import pytest
from test_torch_methods import run  # (this directory is on the path)

import gradfuse
from gradfuse import Tensor
from gradfuse.diagnostics import GradfuseError

TIES = np.array([[3.0, 1.0, 3.0, -np.inf, 2.0], [0.5, 4.0, 1.0, 1.0, -np.inf]], np.float32)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_topk_is_pytorchs_with_ties_in_index_order(backend: str) -> None:
    torch = pytest.importorskip("torch")

    def build(p: Tensor):  # noqa: ANN202
        v, i = p.topk(3)
        w, j = gradfuse.topk(p, 2, dim=0, largest=False)
        a, b = p.topk(5)  # -inf taken last, each once
        return (v * gradfuse.tensor([1.0, 2.0, 3.0])).sum() + w.sum() * 10, [v, i, w, j, a, b]

    v, i, w, j, a, b, grad = run(backend, build, TIES)
    t = torch.tensor(TIES, dtype=torch.float64, requires_grad=True)
    tv, ti = t.topk(3)
    tw, tj = torch.topk(t, 2, dim=0, largest=False)
    ((tv * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum() + tw.sum() * 10).backward()
    np.testing.assert_array_equal(v, tv.detach().numpy())
    np.testing.assert_array_equal(i, [[0, 2, 4], [1, 2, 3]])  # ties: the first index first
    np.testing.assert_array_equal(w, tw.detach().numpy())
    np.testing.assert_array_equal(j, tj.numpy())
    np.testing.assert_array_equal(a[:, -1], [-np.inf, -np.inf])
    assert sorted(b[0]) == [0, 1, 2, 3, 4] and sorted(b[1]) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(grad, t.grad.numpy())  # (no tie in these gradients)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_a_tensor_exponent_is_pytorchs(backend: str) -> None:
    torch = pytest.importorskip("torch")
    base = np.array([[-2.0, -1.5, 0.0, 0.75, 3.0]], np.float32).T  # [5, 1]
    powers = np.array([1.0, 2.0, 3.0, 0.0, -1.0], np.float32)

    def build(p: Tensor):  # noqa: ANN202
        y = p ** gradfuse.tensor(powers)
        half = p.detach() ** gradfuse.tensor([0.5])  # NaN for a negative base
        return (y * 0.1).sum() + (2.0 ** (p * 0.5)).sum(), [y, half, p.mT]

    y, half, mt, grad = run(backend, build, base)
    t = torch.tensor(base, dtype=torch.float64, requires_grad=True)
    ty = t ** torch.tensor(powers, dtype=torch.float64)
    ((ty * 0.1).sum() + (2.0 ** (t * 0.5)).sum()).backward()
    want_half = torch.tensor(base, dtype=torch.float64) ** 0.5
    np.testing.assert_array_equal(np.isnan(half), np.isnan(want_half.numpy()))
    finite = np.isfinite(ty.detach().numpy())
    np.testing.assert_array_equal(np.isfinite(y), finite)  # (1 / 0 is inf)
    # float32 exp2(e log2 |x|) against float64 (2026-12-07, reference and c): within
    # 7.1e-8 relative, the gradients within 6.2e-8; the bounds are over 10x that
    np.testing.assert_allclose(y[finite], ty.detach().numpy()[finite], rtol=1e-6)
    np.testing.assert_array_equal(mt, base.T)
    rows = [0, 1, 3, 4]  # (at a zero base PyTorch's gradient of 0 ** -1 is -inf, ours NaN)
    np.testing.assert_allclose(grad[rows], t.grad.numpy()[rows], rtol=2e-6)


def test_rows_indexed_by_arange_and_targets_gather() -> None:
    gradfuse.reset()
    x = gradfuse.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    target = gradfuse.tensor([2, 0])
    assert x[gradfuse.arange(2), target].tolist() == [3.0, 4.0]
    assert x[range(2), target].tolist() == [3.0, 4.0]
    with pytest.raises(GradfuseError, match="only ints, slices"):
        x[gradfuse.tensor([1, 0]), target]  # not every row in order
