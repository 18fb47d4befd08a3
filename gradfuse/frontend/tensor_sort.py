"""PyTorch's `sort`, `argsort`, `msort` and `median`, composed of tg ops (no op of their own):
each element's rank is the count of the elements that sort before it (a comparison of
every pair along the dim, NaN after every number as in PyTorch, ties in index order),
the index at each sorted position is the one whose rank it is, and the values are
gathered there, so their gradient reaches the element each came from:

    values, indices = x.sort(dim=1, descending=True)
    order = gradfuse.argsort(scores)          # indices only

    %before = x_j < x_i, or neither x_i < x_j and j < i (NaN last)    [.., n, n, ..]
    %rank = tg.reduce_sum %before [d + 1]                              (a mask's count)
    %index = tg.reduce_sum(tg.where(%rank == p, i, 0)) [d + 1]
    %values = tg.gather x, %index, d

The pairs take n^2 elements a row: meant for the short dims that models sort (a
decoder's candidates, a batch's lengths), as tensors of indices are f32 (exact below
2^24). Ties come out in index order, PyTorch's `stable=True` order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import Float32Type, TensorType

from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor_reduce import ValuesIndices, _positions

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor


def sort(
    x: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False
) -> ValuesIndices:
    """The values along `dim` in ascending (or descending) order and the indices they
    came from, as PyTorch's `sort`: NaN sorts as the largest, ties keep index order.
    `lengths, order = lengths.sort(0, descending=True)`"""
    if not isinstance(descending, bool) or not isinstance(stable, bool):
        raise error("sort: descending and stable must be bools")
    if not x.ndim:  # PyTorch: a 0-dim tensor is its own sort, index 0
        B.normalize_dims(dim, 1, "sort")
        return ValuesIndices(x, x._new(B.const(0.0, TensorType(Float32Type(), []))))
    d = B.normalize_dims(dim, x.ndim, "sort")[0]
    indices = _order(x, d, descending)
    return ValuesIndices(x.gather(d, indices), indices)


def argsort(
    x: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False
) -> Tensor:
    """The indices that sort `x` along `dim` (`sort`'s second result), as PyTorch's."""
    return sort(x, dim, descending, stable=stable).indices


def msort(x: Tensor) -> Tensor:
    """`x` sorted along dim 0 (the values), as PyTorch's `msort`."""
    return sort(x, 0).values


def median(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor | ValuesIndices:
    """The lower median (sorted position (n - 1) // 2) of all elements, or the values and
    indices along `dim`, as PyTorch's; NaN where the elements hold a NaN. Its gradient
    reaches the element taken."""
    if dim is None:
        return median(x.reshape(-1), 0).values  # type: ignore[union-attr]
    d = B.normalize_dims(dim, x.ndim, "median")[0] if x.ndim else 0
    if not x.ndim:
        return ValuesIndices(x, x._new(B.const(0.0, TensorType(Float32Type(), []))))
    k = (x.shape[d] - 1) // 2
    values, indices = sort(x, d)
    at = (*[slice(None)] * d, slice(k, k + 1))
    v, i = values[at], indices[at]
    v = x._where(x.isnan().float().amax(d, keepdim=True) > 0.5, float("nan"), v)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


def _order(x: Tensor, d: int, descending: bool) -> Tensor:
    """The index at each sorted position along dim `d`: a position `p` takes the `i`
    whose rank (the count of the `j` that sort before it) is `p`. The sort key is
    (NaN or not, value, index), negated for `descending` (NaN then comes first)."""
    key = x.detach()
    nan = key.isnan().float()
    if descending:
        key, nan = -key, -nan
    xi, xj = key.unsqueeze(d + 1), key.unsqueeze(d)  # i along d, j along d + 1
    ci, cj = nan.unsqueeze(d + 1), nan.unsqueeze(d)
    positions = _positions(x, d)
    i, j = positions.unsqueeze(d + 1), positions.unsqueeze(d)
    # (two NaNs compare neither way: tied, as two equal numbers)
    same_class = ~(cj < ci) & ~(ci < cj)
    ahead = (cj < ci) | (same_class & ((xj < xi) | (~(xi < xj) & (j < i))))
    rank = ahead.sum(d + 1)  # each i's sorted position, along d
    taken = (rank.unsqueeze(d) - i).square() < 0.25  # [p along d, i along d + 1]: i's rank is p
    return x._where(taken, j, 0.0).sum(d + 1)
