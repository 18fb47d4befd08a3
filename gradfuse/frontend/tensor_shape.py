"""PyTorch's shape methods of `Tensor` that are a reshape, a permute or a broadcast of
it (no op of their own); `Tensor` has them as methods:

    x.flatten(1)             # [N, C, H, W] -> [N, C*H*W] (tg.reshape)
    x.unsqueeze(1)           # [N, L] -> [N, 1, L]; x.squeeze(1) back
    w.t()                    # a matrix transposed (tg.permute)
    b.expand(8, -1)          # [1, 4] -> [8, 4] (tg.broadcast); -1 keeps a dim
    x.contiguous()           # x: layouts are the compiler's business
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import TYPE_CHECKING

from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor


def dims_arg(args: tuple[int | Sequence[int], ...]) -> Sequence[int]:
    """The dims of `f(2, 3)` or `f([2, 3])`: the one sequence argument, else the ints."""
    return args[0] if len(args) == 1 and not isinstance(args[0], int) else args  # type: ignore[return-value]


def per_channel(v: Tensor, ndim: int) -> Tensor:
    """A per-channel vector [C] shaped [1, C, 1, ...] to broadcast along dim 1 of a
    rank-`ndim` input (a batch norm's statistics, a `GroupNorm` weight, PReLU's slopes)."""
    return v.reshape([1, v.shape[0]] + [1] * (ndim - 2))


def copies(x: Tensor, reps: Sequence[int], each: bool) -> Tensor:
    """`x` with dim k copied `reps[k]` times: each element in turn (`each`: nearest
    upsampling, `F.interpolate`) or the whole dim (tiling, `repeat`); a `tg.broadcast`
    between two reshapes, whose gradient sums the copies."""
    pairs = [(n, r) if each else (r, n) for n, r in zip(x.shape, reps)]
    ones = [(n, 1) if each else (1, n) for n in x.shape]
    wide = x.reshape([d for pair in ones for d in pair]).broadcast_to(
        [d for pair in pairs for d in pair]
    )
    return wide.reshape([n * r for n, r in zip(x.shape, reps)])


def new_dim(dim: int, rank: int, what: str) -> int:
    """Where a new dim `dim` goes in a result of rank `rank + 1` (-1: last), or an error."""
    if not -rank - 1 <= dim <= rank:
        raise error(
            f"{what}: dim {dim} is out of range for a tensor of rank {rank}"
            f" (expected {-rank - 1} to {rank})"
        )
    return dim % (rank + 1)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A new dim of size 1 at `dim` (in [-ndim - 1, ndim], as PyTorch), a `tg.reshape`.

    `x.unsqueeze(1)`: [N, L] -> [N, 1, L]
    """
    shape = list(x.shape)
    shape.insert(new_dim(dim, x.ndim, "unsqueeze"), 1)
    return x.reshape(shape)


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Drops the dims of size 1 (all, or those in `dim`, an int or a tuple); a named dim
    of another size stays, as in PyTorch (`tg.reshape`).

    `x.squeeze(1)`: [N, 1, L] -> [N, L]; `x.squeeze()` drops every 1.
    """
    dims = B.normalize_dims(dim, x.ndim, "squeeze")
    return x.reshape([n for i, n in enumerate(x.shape) if n != 1 or i not in dims])


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dims `start_dim` to `end_dim` (both included) as one, as PyTorch's `flatten`: all
    of them by default (a 0-d tensor becomes one element). `x.flatten(1)`: [N, C, H, W]
    -> [N, C*H*W]"""
    rank = max(x.ndim, 1)
    start, end = start_dim % rank, end_dim % rank
    if not (-rank <= start_dim < rank and -rank <= end_dim < rank) or start > end:
        raise error(
            f"flatten: start_dim {start_dim} and end_dim {end_dim} do not fit"
            f" a tensor of rank {x.ndim}"
        )
    shape = x.shape
    return x.reshape([*shape[:start], prod(shape[start : end + 1]), *shape[end + 1 :]])


def t(x: Tensor) -> Tensor:
    """A matrix transposed; a 0-d or 1-d tensor as it is (PyTorch's `t`)."""
    if x.ndim > 2:
        raise error(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return x.permute([1, 0]) if x.ndim == 2 else x


def expand(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """`x` repeated along its dims of size 1 (and new leading dims) to `sizes`; -1 keeps
    a dim's size, as PyTorch's `expand` (a `tg.broadcast`). `b.expand(8, -1)`"""
    want = list(dims_arg(sizes))
    if len(want) < x.ndim:
        raise error(
            f"expand: the number of sizes ({len(want)}) must be at least the tensor's"
            f" rank ({x.ndim})"
        )
    have = [None] * (len(want) - x.ndim) + list(x.shape)
    shape = []
    for k, (n, old) in enumerate(zip(want, have)):
        if n == -1 and old is None:
            raise error(f"expand: -1 is not allowed for the new leading dim {k}")
        size = old if n == -1 else n
        if old not in (None, 1, size):
            raise error(
                f"expand: the expanded size {size} must match the existing size {old}"
                f" at non-singleton dim {k}"
            )
        shape.append(size)
    return x.broadcast_to(shape)


def split(x: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple:
    """Consecutive slices along `dim`: of `split_size_or_sections` each (the last one
    shorter), or of the sizes listed, as PyTorch's `split`. `q, k, v = x.split(64, -1)`"""
    d = B.normalize_dims(dim, x.ndim, "split")[0]
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections < 1:
            raise error(f"split: the size must be positive, got {split_size_or_sections}")
        step = split_size_or_sections
        sizes = [min(step, n - start) for start in range(0, n, step)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise error(f"split: sizes {sizes} must be >= 0 and add up to dim {d}'s {n}")
    out, start = [], 0
    for size in sizes:
        out.append(x[(slice(None),) * d + (slice(start, start + size),)])
        start += size
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple:
    """At most `chunks` slices along `dim` of ceil(n / chunks) each (the last shorter),
    as PyTorch's `chunk`. `a, b = x.chunk(2, dim=1)`"""
    if chunks < 1:
        raise error(f"chunk: the number of chunks must be positive, got {chunks}")
    n = x.shape[B.normalize_dims(dim, x.ndim, "chunk")[0]]
    return split(x, max(-(-n // chunks), 1), dim)


def repeat(x: Tensor, *sizes: int | Sequence[int]) -> Tensor:
    """`x` tiled `sizes[i]` times along each dim (new leading dims where `sizes` is
    longer), as PyTorch's `repeat` (a `tg.broadcast` between two reshapes).
    `x.repeat(1, 2, 1, 1)`: [N, C, H, W] -> [N, 2C, H, W]"""
    reps = list(dims_arg(sizes))
    if len(reps) < x.ndim or any(r < 0 for r in reps):
        raise error(
            f"repeat: needs a count >= 0 for each of the tensor's {x.ndim} dims, got {reps}"
        )
    return copies(x.reshape([1] * (len(reps) - x.ndim) + list(x.shape)), reps, each=False)
