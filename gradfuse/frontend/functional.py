"""Functions on traced tensors (`gradfuse.nn.functional`, PyTorch's `F`): each records tg ops.

import gradfuse.nn.functional as F
y = F.layer_norm(x, [64], weight, bias)     # reduce_sum, sub, mul, sqrt, recip, ...
p = F.dropout(h, 0.1)                       # tg.random on a counter param, cmplt, where

The losses are in `functional_loss.py`, the activations beyond these in `functional_act.py`,
convolutions, pooling and batch norm in `functional_conv.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend.dtypes import element_for
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import (
    emit,
    error,
    insert_into,
    insertion_block,
    program,
    rng,
    traced_loops,
)
from gradfuse.frontend.tensor import Tensor, where
from gradfuse.frontend.tensor_shape import dims_arg, new_dim


def constant(array: np.ndarray | Sequence[float] | float, dtype: object = np.float32) -> Tensor:
    """A constant tensor with the values of `array` (a dense `tg.constant`).

    `gradfuse.constant(np.arange(4.0))` records `tg.constant dense<[0.0, ...]>`.
    """
    arr = np.asarray(array, dtype=dtype)
    return Tensor(B.dense(arr, element_for(arr.dtype)))


def _tensor_list(what: str, tensors: Sequence[Tensor]) -> list[Tensor]:
    """`tensors` as a non-empty list of Tensors of one element type, or an error."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence | Iterator):
        raise error(f"{what}: expected a list or tuple of Tensors, got {type(tensors).__name__}")
    xs = list(tensors)
    if not xs:
        raise error(f"{what}: expected a non-empty list of Tensors")
    for i, x in enumerate(xs):
        if not isinstance(x, Tensor):
            raise error(f"{what}: entry {i} is a {type(x).__name__}, not a Tensor")
        if x.dtype != xs[0].dtype:
            raise error(f"{what}: entry {i} holds {x.dtype}, entry 0 {xs[0].dtype}")
    return xs


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Joins `tensors` along `dim` (`tg.concat`); they agree in every other dim.

    `gradfuse.cat([a, b], dim=1)`: [2, 3] and [2, 4] -> [2, 7]
    """
    xs = _tensor_list("cat", tensors)
    rank = xs[0].ndim
    if rank == 0:
        raise error("cat: a 0-d tensor cannot be concatenated (stack() makes a new dim)")
    d = B.normalize_dims(dim, rank, "cat")[0]
    for i, x in enumerate(xs):
        if x.ndim != rank or any(
            a != b for j, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if j != d
        ):
            raise error(
                f"cat: entry {i} has shape {fmt_shape(x.shape)} and entry 0"
                f" {fmt_shape(xs[0].shape)}: they must agree except in dim {d}"
            )
    if len(xs) == 1:
        return xs[0]
    return Tensor(B.concat([x.value for x in xs], d))


concat = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Joins equal-shaped `tensors` along a new dim `dim` (each unsqueezed, then `cat`).

    `gradfuse.stack([a, b], dim=0)`: two [2, 3] -> [2, 2, 3]
    """
    xs = _tensor_list("stack", tensors)
    for i, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise error(
                f"stack: entry {i} has shape {fmt_shape(x.shape)} and entry 0"
                f" {fmt_shape(xs[0].shape)}: stack needs equal shapes"
            )
    d = new_dim(dim, xs[0].ndim, "stack")
    return cat([x.unsqueeze(d) for x in xs], d)


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """`input.unsqueeze(dim)`: a new dim of size 1. `gradfuse.unsqueeze(x, 0)`"""
    return input.unsqueeze(dim)


def squeeze(input: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """`input.squeeze(dim)`: drops dims of size 1. `gradfuse.squeeze(x, (0, 2))`"""
    return input.squeeze(dim)


def masked_fill(input: Tensor, mask: Tensor, value: Tensor | float) -> Tensor:
    """`input.masked_fill(mask, value)`. `gradfuse.masked_fill(s, m, -1e9)`"""
    return input.masked_fill(mask, value)


def erf(x: Tensor) -> Tensor:
    """The error function elementwise (`tg.erf`). `gradfuse.erf(x)`"""
    return x.erf()


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """`torch.gather`: `out[i] = x[i with i[dim] := index[i]]`, shaped like `index`.

    `index` has `x`'s rank and holds integers as floats. `gather(logp, 1, target[:, None])`
    """
    return x.gather(dim, index)


def scatter_add(*args: Any) -> Tensor:
    """PyTorch's `scatter_add(input, dim, index, src)`: `input` plus `src` added at
    `index` along `dim`; or gradfuse's `scatter_add(index, src, dim, shape)`: zeros of
    `shape`, then `out[i with i[dim] := index[i]] += src[i]` (`tg.scatter_add`).

    `scatter_add(ids, rows, 0, [vocab, dim])` sums rows per id.
    """
    if len(args) == 4 and isinstance(args[1], int):
        x, dim, index, src = args
        return x.scatter_add(dim, index, src)  # type: ignore[no-any-return]
    if len(args) != 4:
        raise error("scatter_add: expects (input, dim, index, src) or (index, src, dim, shape)")
    index, src, dim, shape = args
    d = B.normalize_dims(dim, len(shape), "tg.scatter_add")[0]
    return Tensor(emit(tg.ScatterAddOp(index.value, src.value, d, list(shape))).result)


def rand(
    *shape: int | Sequence[int], seed: int | None = None, dtype: object = None, **_: object
) -> Tensor:
    """Uniform [0, 1) numbers that change every time the program reaches them (`tg.random`).

    A counter param (`"rng.<n>"`, starting at 0) is read and incremented, so each
    iteration of an `ir_for` draws new numbers; `seed` defaults to a draw from
    `gradfuse.manual_seed`'s generator, so runs are reproducible. In a `scan`/`steps`
    body of T steps, step t draws at counter `c * T + t` (nested loops likewise) and
    the increment follows the outermost loop. `dtype=` casts, `device=` is accepted (as
    torch's; `execute()` chooses where). `rand(2, 16)`
    """
    size = [int(d) for d in dims_arg(shape)]
    if seed is None:
        seed = int(rng().integers(0, 2**32))
    prog = program()
    n = sum(1 for key in prog.params if key.startswith("rng."))
    counter = Parameter(np.zeros((), np.float32), name=f"rng.{n}")
    c = Tensor(counter.value)
    key = c
    loops = traced_loops()
    for loop in loops:  # in a scan/steps body: c * count + step, from the outermost loop in
        assert isinstance(loop, tg.ForOp)
        key = key * float(loop.trip_count) + Tensor(loop.body.block.args[-1]).reshape(())
    out = Tensor(emit(tg.RandomOp(key.value, seed, size)).result)
    after = loops[0].parent_block() if loops else insertion_block()
    assert after is not None
    with insert_into(after):  # after the outermost loop (c is read before it)
        counter.assign(c + 1.0)
    return out if dtype is None or np.dtype(dtype) == np.float32 else out.to(dtype)  # type: ignore[call-overload]


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)`.

    Records nothing when `p == 0` or not `training`. `dropout(h, 0.1)`
    """
    return _dropout(x, p, training, x.shape, "dropout")


def dropout2d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zeroes each whole channel of `input` [N, C, ...] with probability `p` and scales
    the others by `1 / (1 - p)`, as PyTorch's `dropout2d`; records nothing when `p == 0`
    or not `training`. `F.dropout2d(h, 0.2)`"""
    if input.ndim < 3:
        raise error(
            f"dropout2d: input must be [N, C, H, W] (or [N, C, L]), got {list(input.shape)}"
        )
    mask = list(input.shape[:2]) + [1] * (input.ndim - 2)
    return _dropout(input, p, training, mask, "dropout2d")


def _dropout(x: Tensor, p: float, training: bool, mask: Sequence[int], what: str) -> Tensor:
    """`x` with a random mask of shape `mask` (broadcast over `x`) applied: each mask
    element 0 with probability `p`, else `1 / (1 - p)`."""
    if not 0.0 <= p <= 1.0:
        raise error(f"{what}: probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = ~(rand(mask) < p)  # (rand is never NaN: `>=` would test for it)
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`x @ weight.T + bias` (weight [out, in]). `linear(x, w, b)`

    Leading dims of x are one dim of rows while the bias is added (x [T, B, in] is
    [T*B, in]), so that the add is the contraction's epilogue over its own rows."""
    if x.ndim > 2:
        rows = linear(x.reshape(-1, x.shape[-1]), weight, bias)
        return rows.reshape(*x.shape[:-1], weight.shape[0])
    y = x @ weight.T
    return y + bias if bias is not None else y


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: `x * Phi(x)` with erf (`"none"`) or PyTorch's tanh approximation (`"tanh"`).

    `gelu(x, approximate="tanh")`
    """
    if approximate == "none":
        return x * 0.5 * (erf(x * (1.0 / math.sqrt(2.0))) + 1.0)
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1.0)
    raise error(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along `dim` (`tg.softmax`, decomposed with max-subtraction). `softmax(s, -1)`"""
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """`x - max - log(sum(exp(x - max)))` along `dim`. `log_softmax(logits, 1)`"""
    return x.log_softmax(dim)


def layer_norm(
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalises the last `len(normalized_shape)` dims to mean 0, variance 1 (biased).

    `layer_norm(x, [64], w, b)` is `(x - mean) / sqrt(var + eps) * w + b`.
    """
    k = len(normalized_shape)
    if tuple(x.shape[x.ndim - k :]) != tuple(normalized_shape) or x.ndim < k:
        raise error(
            f"layer_norm: input {fmt_shape(x.shape)} does not end with the normalized"
            f" shape {list(normalized_shape)}"
        )
    dims = list(range(x.ndim - k, x.ndim))
    centred = x - x.mean(dims, keepdim=True)
    var = (centred * centred).mean(dims, keepdim=True)
    y = centred * (var + eps).sqrt().reciprocal()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


__all__ = [
    "constant", "erf", "gather", "scatter_add", "rand", "dropout", "dropout2d", "linear",
    "gelu", "softmax", "log_softmax", "layer_norm",
]  # fmt: skip
