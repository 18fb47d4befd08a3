"""PyTorch's reductions and clamps of `Tensor`, returned and differentiated as PyTorch
does, composed of tg ops (no op of their own); `Tensor` has them as methods:

    v, i = x.max(1)          # values and the index of the first maximum along dim 1
    x.max()                  # the maximum of all elements; x.max(y): elementwise
    x.amax((2, 3))           # values only, over several dims (tg.reduce_max)
    x.argmin(0)              # the index of the first minimum along dim 0
    x.clamp(min=0.0)         # tg.where: the gradient passes where min <= x <= max

Indices are f32, as gradfuse's other index tensors (`gather`'s), exact below 2^24. The
values of `max(dim)` and `min(dim)` are gathered at the indices, so their gradient
reaches that one element, as in PyTorch; `amax` and `amin` share it evenly among tied
extremes, as PyTorch's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from xdsl.dialects.builtin import Float32Type, TensorType

from gradfuse.dialects import tg
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor_masks import numeric

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor

Dims = int | Sequence[int] | None


class ValuesIndices(NamedTuple):
    """What `x.max(dim)` and `x.min(dim)` return, as PyTorch's `torch.return_types.max`:
    `values, indices = x.max(1)`; `x.max(1)[0]` is the values."""

    values: Tensor
    indices: Tensor


def sum_(x: Tensor, dim: Dims = None, keepdim: bool = False, *, dtype: object = None) -> Tensor:
    """Sum over `dim` (all dims when None) (`tg.reduce_sum`); a mask counts its trues;
    `dtype` casts x first, as PyTorch's."""
    x = x if dtype is None else x.to(dtype)
    return x._new(B.reduce(tg.ReduceSumOp, numeric(x.value), dim, keepdim))


def mean(x: Tensor, dim: Dims = None, keepdim: bool = False, *, dtype: object = None) -> Tensor:
    """Mean over `dim` (all dims when None) (`tg.reduce_mean`, a composite); `dtype`
    casts x first."""
    x = x if dtype is None else x.to(dtype)
    return x._new(B.reduce(tg.ReduceMeanOp, numeric(x.value), dim, keepdim))


def amax(x: Tensor, dim: Dims = (), keepdim: bool = False) -> Tensor:
    """The maximum over `dim` (an int or several; `()` or None: all) (`tg.reduce_max`)."""
    dims = None if dim is None or dim == () else dim
    return x._new(B.reduce(tg.ReduceMaxOp, x.value, dims, keepdim))


def amin(x: Tensor, dim: Dims = (), keepdim: bool = False) -> Tensor:
    """The minimum over `dim`, as `-amax(-x)`."""
    return -amax(-x, dim, keepdim)


def max_(
    x: Tensor, dim: int | Tensor | None = None, keepdim: bool = False
) -> Tensor | ValuesIndices:
    """As PyTorch's `x.max`: `x.max()` the maximum of all elements, `x.max(dim)` the values
    and indices along `dim` (`ValuesIndices`), `x.max(other)` the elementwise maximum."""
    return _extreme(x, dim, keepdim, "max")


def min_(
    x: Tensor, dim: int | Tensor | None = None, keepdim: bool = False
) -> Tensor | ValuesIndices:
    """As `max_`, for the minimum."""
    return _extreme(x, dim, keepdim, "min")


def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the first maximum along `dim` (in the flattened tensor when None)."""
    return _arg(x, dim, keepdim, "argmax")


def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the first minimum along `dim` (in the flattened tensor when None)."""
    return _arg(x, dim, keepdim, "argmin")


def clamp(x: Tensor, min: object = None, max: object = None) -> Tensor:
    """`min` where `x < min`, `max` where `x > max`, else `x` (numbers, or tensors that
    broadcast); the gradient passes where `min <= x <= max`, as in PyTorch.
    `x.clamp(min=0.0)`, `x.clamp(-1, 1)`"""
    if min is None and max is None:
        raise error("clamp: at least one of min and max must be given")
    out = x
    if min is not None:
        out = x._where(out < min, min, out)
    if max is not None:
        out = x._where(out > max, max, out)
    return out


def topk(
    x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True  # noqa: A002
) -> ValuesIndices:
    """The `k` largest (or smallest) values along `dim` and their indices, largest
    first, as PyTorch's `topk` (of tied values, the first index first): `k` rounds of
    `max(dim)`, each masking the position it took; the gradient reaches the positions
    taken. `decoder_output.topk(1)`"""
    if not x.ndim:
        raise error("topk: expects a tensor of rank >= 1")
    d = B.normalize_dims(dim, x.ndim, "topk")[0]
    if not isinstance(k, int) or not 0 < k <= x.shape[d]:
        raise error(f"topk: k must be in [1, {x.shape[d]}] (the size of dim {d}), got {k!r}")
    n, positions = x.shape[d], _positions(x, d)
    rest, taken, hits = x if largest else -x, [], None
    for _ in range(k):  # the first best position not taken yet (-inf values included)
        best = rest == amax(rest, d, keepdim=True)
        best = best if hits is None else best & ~hits
        index = amin(x._where(best, positions, float(n)), d, keepdim=True)
        hit = positions == index
        hits = hit if hits is None else hits | hit
        taken.append(index)
        rest = x._where(hit, float("-inf"), rest)
    indices = x._new(B.concat([i.value for i in taken], d)) if k > 1 else taken[0]
    return ValuesIndices(x.gather(d, indices), indices)


def _extreme(x: Tensor, dim: object, keepdim: bool, which: str) -> Tensor | ValuesIndices:
    if hasattr(dim, "value"):  # x.max(other): elementwise
        other: Tensor = dim  # type: ignore[assignment]
        return x.maximum(other) if which == "max" else -(-x).maximum(-other)
    if dim is None:
        return amax(x) if which == "max" else amin(x)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise error(
            f"{which}(dim): dim must be an int, as in PyTorch, got {dim!r}"
            f" (a{which}(dims) reduces several dims and gives the values only)"
        )
    indices = _arg(x, dim, True, "arg" + which)
    if not x.ndim:
        return ValuesIndices(x, indices.reshape([]))
    d = B.normalize_dims(dim, x.ndim, which)[0]
    values = x.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return ValuesIndices(values, indices)


def _arg(x: Tensor, dim: int | None, keepdim: bool, which: str) -> Tensor:
    """The first index of the maximum (`argmax`) or minimum along `dim`, as f32: the
    least position where `x` equals its extreme (elsewhere, the dim's length)."""
    if dim is None:
        return _arg(x.reshape(-1), 0, False, which)
    if not x.ndim:
        B.normalize_dims(dim, 0, which)  # (the dim must be 0 or -1)
        return x._new(B.const(0.0, TensorType(Float32Type(), [1] if keepdim else [])))
    d = B.normalize_dims(dim, x.ndim, which)[0]
    extreme = amax(x, d, keepdim=True) if which == "argmax" else amin(x, d, keepdim=True)
    n = x.shape[d]
    return amin(x._where(x == extreme, _positions(x, d), float(n)), d, keepdim)


def _positions(x: Tensor, d: int) -> Tensor:
    """0, 1, ... along dim `d` of `x` (f32), of size 1 in the other dims."""
    n = x.shape[d]
    shape = [n if k == d else 1 for k in range(x.ndim)]
    return x._new(B.dense(np.arange(n, dtype=np.float32).reshape(shape), Float32Type()))


def var(
    x: Tensor,
    dim: Dims | bool = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:
    """The variance over `dim` (all dims when None): the squared deviations from the
    mean summed and divided by `n - correction` (1 unless `unbiased=False`; NaN where
    n <= correction), as PyTorch's `var`, its legacy `var(unbiased)` too."""
    if isinstance(dim, bool):  # x.var(False): PyTorch's legacy var(unbiased)
        dim, unbiased = None, dim
    if correction is None:
        correction = 0.0 if unbiased is False else 1.0
    elif unbiased is not None:
        raise error("var: give correction or unbiased, not both")
    dims = B.normalize_dims(dim, x.ndim, "var")  # type: ignore[arg-type]
    n = prod(x.shape[d] for d in dims)
    deviation = x - x.mean(dims, keepdim=True)
    scale = 1.0 / (n - correction) if n > correction else float("nan")
    return (deviation * deviation).sum(dims, keepdim) * scale


def std(
    x: Tensor,
    dim: Dims | bool = None,
    unbiased: bool | None = None,
    keepdim: bool = False,
    *,
    correction: float | None = None,
) -> Tensor:
    """The square root of `var` (same arguments)."""
    return var(x, dim, unbiased, keepdim, correction=correction).sqrt()


def norm(x: Tensor, p: float | str = "fro", dim: Dims = None, keepdim: bool = False) -> Tensor:
    """The vector norm over `dim` (all dims when None): `p` 2 or "fro" (the square root
    of the sum of squares), 1 (the sum of |x|) or inf (the largest |x|); a zero vector's
    gradient is 0, as PyTorch's (its subgradient)."""
    if p in (2, 2.0, "fro"):  # 0, with gradient 0, where all are 0 (sqrt's is infinite)
        squares = (x * x).sum(dim, keepdim)
        zero = squares <= 0.0
        return x._where(zero, 0.0, x._where(zero, 1.0, squares).sqrt())
    if p in (1, 1.0):
        return x.abs().sum(dim, keepdim)
    if p == float("inf"):
        return amax(x.abs(), dim, keepdim)
    raise error(f"norm: p must be 1, 2, 'fro' or inf, got {p!r}")


def var_mean(
    x: Tensor, dim: Dims | bool = None, unbiased: bool | None = None, keepdim: bool = False,
    *, correction: float | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """`(var, mean)` over `dim` (`var`'s arguments), as torch.var_mean."""
    d = None if isinstance(dim, bool) else dim
    return var(x, dim, unbiased, keepdim, correction=correction), mean(x, d, keepdim)


def std_mean(
    x: Tensor, dim: Dims | bool = None, unbiased: bool | None = None, keepdim: bool = False,
    *, correction: float | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """`(std, mean)` over `dim`, as torch.std_mean."""
    d = None if isinstance(dim, bool) else dim
    return std(x, dim, unbiased, keepdim, correction=correction), mean(x, d, keepdim)
