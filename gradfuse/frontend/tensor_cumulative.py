"""PyTorch's `cumsum`, `cumprod`, `prod`, `flip` and `roll`, composed of tg ops (no op
of their own):

    x.cumsum(1)      # log2(n) rounds of y + (y shifted by 1, 2, 4, ... along dim 1,
                     # zeros shifted in): tg.slice, tg.concat, tg.add
    x.cumprod(1)     # the same rounds of y * (y shifted, ones shifted in)
    x.logcumsumexp(1)  # and of logaddexp(y, y shifted, -inf shifted in)
    x.prod(1)        # log2(n) rounds of (first half) * (second half): no division, so
                     # the gradient is right where an element is 0, as PyTorch's
    x.flip(0)        # tg.gather at n-1, ..., 0 along dim 0 (a broadcast index)
    x.roll(2, 1)     # tg.concat of the last 2 along dim 1 and the rest

Each is exact where PyTorch's is (the scan adds what the running sum adds, grouped
differently: within float32 rounding of the sum), and an infinity or NaN stays where
PyTorch's does (no product by 0, as a triangular matmul would make).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import Float32Type, TensorType

from gradfuse.dialects.tg_builder import element_type
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor


def cumsum(x: Tensor, dim: int) -> Tensor:
    """The running sum along `dim` (Hillis and Steele's scan: log2(n) shifted adds)."""
    d = B.normalize_dims(dim, x.ndim, "cumsum")[0]
    n, y, k = x.shape[d], x, 1
    while k < n:
        y = y + _shifted(y, d, k, 0.0)
        k *= 2
    return y


def cumprod(x: Tensor, dim: int) -> Tensor:
    """The running product along `dim` (the scan of `cumsum` with products)."""
    d = B.normalize_dims(dim, x.ndim, "cumprod")[0]
    n, y, k = x.shape[d], x, 1
    while k < n:
        y = y * _shifted(y, d, k, 1.0)
        k *= 2
    return y


def logcumsumexp(x: Tensor, dim: int) -> Tensor:
    """`log(cumsum(exp(x)))` along `dim` without overflow: the scan of `cumsum` with
    `logaddexp` (-inf shifted in), whose gradient is each prefix's softmax."""
    d = B.normalize_dims(dim, x.ndim, "logcumsumexp")[0]
    n, y, k = x.shape[d], x, 1
    while k < n:
        y = y.logaddexp(_shifted(y, d, k, float("-inf")))
        k *= 2
    return y


def prod(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """The product along `dim` (of all elements when None): halves multiplied pairwise,
    an odd last element carried to the next round."""
    if dim is None:
        out = prod(x.reshape(-1), 0)
        return out.reshape([1] * x.ndim) if keepdim else out
    d = B.normalize_dims(dim, x.ndim, "prod")[0]
    y, head = x, [slice(None)] * d
    while (n := y.shape[d]) > 1:
        half = n // 2
        pairs = y[(*head, slice(0, half))] * y[(*head, slice(half, 2 * half))]
        odd = [y[(*head, slice(2 * half, n))].value] if n % 2 else []
        y = y._new(B.concat([pairs.value, *odd], d)) if odd else pairs
    return y if keepdim else y.squeeze(d)


def _shifted(y: Tensor, d: int, k: int, fill: float) -> Tensor:
    """`y` moved `k` along dim `d`, `fill` in front: `[fill] * k + y[:n - k]`."""
    n = y.shape[d]
    front = [k if j == d else size for j, size in enumerate(y.shape)]
    filled = B.const(fill, TensorType(element_type(y.value), front))
    rest = y[(*[slice(None)] * d, slice(0, n - k))]
    return y._new(B.concat([filled, rest.value], d))


def flip(x: Tensor, dims: int | Sequence[int]) -> Tensor:
    """`x` reversed along each of `dims`."""
    out = x
    for d in B.normalize_dims(dims if not isinstance(dims, int) else [dims], x.ndim, "flip"):
        n = x.shape[d]
        shape = [n if k == d else 1 for k in range(x.ndim)]
        reverse = np.arange(n - 1, -1, -1, dtype=np.float32).reshape(shape)
        index = B.broadcast(B.dense(reverse, Float32Type()), list(x.shape))
        out = out.gather(d, out._new(index))
    return out


def roll(x: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:  # fmt: skip
    """`x` shifted `shifts` along `dims`, wrapping around (flattened when `dims` is None)."""
    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(list(x.shape))
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise error(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = x
    for s, d in zip(shifts, B.normalize_dims(dims, x.ndim, "roll"), strict=True):
        n = x.shape[d]
        s %= n
        if s:
            head = [slice(None)] * d
            tail, rest = out[(*head, slice(n - s, n))], out[(*head, slice(0, n - s))]
            out = out._new(B.concat([tail.value, rest.value], d))
    return out
