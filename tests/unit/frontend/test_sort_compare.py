"""`sort`, `argsort`, `msort` (tensor_sort.py), NaN in comparisons (tg_builder's
compare_ne and compare_le) and `isnan`/`isinf`/`isfinite` against PyTorch's float64
or NumPy: values, indices, gradients."""

from __future__ import annotations

import numpy as np
import pytest
from test_torch_methods import run  # (this directory is on the path)

import gradfuse
from gradfuse import Tensor
from gradfuse.diagnostics import GradfuseError

NAN = np.array(
    [[3.0, np.nan, 1.0, 3.0, -np.inf, 2.0], [0.5, 4.0, 1.0, 1.0, np.nan, -2.0]], np.float32
)
WEIGHTS = [1.0, 2.0, 3.0]
REVERSED = np.tile(np.arange(5.0, -1.0, -1.0, dtype=np.float32), (2, 1))


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_comparisons_with_nan_are_ieees(backend: str) -> None:
    def build(p: Tensor):  # noqa: ANN202
        q = p.gather(1, gradfuse.tensor(REVERSED))  # each row reversed
        masks = [p == q, p != q, p <= q, p >= q, p < q, p > q, p == 1.0, p != float("nan")]
        masks += [p.isnan(), gradfuse.isinf(p), p.isfinite()]
        return p.sum(), [m.float() for m in masks]

    *got, _ = run(backend, build, NAN)
    q = NAN[:, ::-1]
    want = [NAN == q, NAN != q, NAN <= q, NAN >= q, NAN < q, NAN > q, NAN == 1.0, NAN != np.nan]
    want += [np.isnan(NAN), np.isinf(NAN), np.isfinite(NAN)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.astype(np.float32))


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_sort_is_pytorchs_with_nan_last_and_ties_in_index_order(backend: str) -> None:
    torch = pytest.importorskip("torch")

    def build(p: Tensor):  # noqa: ANN202
        v, i = p.sort()
        w, j = gradfuse.sort(p, dim=0, descending=True)
        k = p.argsort(descending=True)
        loss = (v[:, :3] * gradfuse.tensor(WEIGHTS)).sum() + (w[0] * 10.0).sum()
        return loss, [v, i, w, j, k]

    v, i, w, j, k, grad = run(backend, build, NAN)
    t = torch.tensor(NAN, dtype=torch.float64, requires_grad=True)
    tv, ti = t.sort(stable=True)
    tw, tj = torch.sort(t, dim=0, descending=True, stable=True)
    loss = (tv[:, :3] * torch.tensor(WEIGHTS, dtype=torch.float64)).sum() + (tw[0] * 10).sum()
    loss.backward()
    np.testing.assert_array_equal(v, tv.detach().numpy())  # (NaN equal to NaN here)
    np.testing.assert_array_equal(i, ti.numpy())
    np.testing.assert_array_equal(w, tw.detach().numpy())
    np.testing.assert_array_equal(j, tj.numpy())
    np.testing.assert_array_equal(k, t.detach().argsort(descending=True, stable=True).numpy())
    np.testing.assert_array_equal(grad, t.grad.numpy())  # each value's weight, exactly


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_sort_along_a_middle_dim_and_msort(backend: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)

    def build(p: Tensor):  # noqa: ANN202
        v, i = p.sort(1)
        scale = gradfuse.tensor(np.arange(1.0, 6.0, dtype=np.float32).reshape(5, 1))
        return (v * scale).sum(), [v, i, gradfuse.msort(p)]

    v, i, m, grad = run(backend, build, x)
    order = np.argsort(x, 1, kind="stable")
    np.testing.assert_array_equal(v, np.sort(x, 1))
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(m, np.sort(x, 0))
    want = np.zeros_like(x)  # the element at rank r gets weight r + 1
    np.put_along_axis(want, order, np.arange(1.0, 6.0, dtype=np.float32).reshape(1, 5, 1), 1)
    np.testing.assert_array_equal(grad, want)


def test_sort_of_a_scalar_and_bad_arguments() -> None:
    v, i, _ = run("reference", lambda p: (p.sum(), list(p.sum().sort())), NAN[:1, :1])
    assert float(i) == 0.0 and np.isclose(float(v), 3.0)
    with pytest.raises(GradfuseError, match="sort: descending and stable must be bools"):
        run("reference", lambda p: (p.sum(), [p.sort(0, "yes").values]))
    with pytest.raises(GradfuseError, match="dim"):
        run("reference", lambda p: (p.sum(), [p.sort(2).values]), NAN)
