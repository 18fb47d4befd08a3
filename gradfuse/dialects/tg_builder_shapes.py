"""The base of `TgBuilder` (see `tg_builder`): constants, shapes, movement, reductions and
contractions, with NumPy's rules (broadcasting, `-1` in a reshape, `matmul`'s promotion,
basic indexing) made explicit:

    b.matmul(x, v)     // x: tensor<2x3xf32>, v: tensor<3xf32>
                       // %v2 = tg.reshape %v : tensor<3x1xf32>
                       // %p = tg.dot %x, %v2 : tensor<2x1xf32>
                       // %y = tg.reshape %p : tensor<2xf32>
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from xdsl.dialects.builtin import DenseArrayBase, DenseIntOrFPElementsAttr, TensorType, f64
from xdsl.ir import Attribute, Operation, SSAValue

from gradfuse.dialects import tg_compute as C
from gradfuse.dialects import tg_data as D
from gradfuse.dialects.tg_base import (
    element_type,
    fmt_shape,
    i64_array,
    scalar_attr,
    shape_of,
    tensor,
)


@lru_cache(maxsize=4096)
def tensor_type(shape: tuple[int, ...], element: Attribute) -> TensorType:
    """A shared `tensor<shape x element>` (types repeat through a program)."""
    return tensor(shape, element)


@lru_cache(maxsize=4096)
def i64s(values: tuple[int, ...]) -> DenseArrayBase:
    """A shared `array<i64: values>` property."""
    return i64_array(values)


def keepdims_shape(shape: Sequence[int], dims: Sequence[int]) -> list[int]:
    """`shape` with the reduced `dims` kept as 1: (2, 3, 4), [1] -> [2, 1, 4]."""
    return [1 if i in dims else n for i, n in enumerate(shape)]


class ShapeBuilder:
    """Builds tg ops through `insert` (which places an op and returns it); misuse is
    reported through `fail(message)`, which returns the exception to raise."""

    def __init__(self, insert: Callable[[Operation], Operation], fail: Callable[[str], Exception]):
        self.insert, self.fail = insert, fail

    def emit(self, op: Operation) -> SSAValue:
        """Inserts `op` and returns its only result."""
        return self.insert(op).results[0]

    def const(self, value: float, like: SSAValue | TensorType) -> SSAValue:
        """A splat `tg.constant` of the type of `like` (a value or a tensor type)."""
        ty = like.type if isinstance(like, SSAValue) else like
        assert isinstance(ty, TensorType)
        attr = scalar_attr(float(value), f64)
        return self.emit(D.ConstantOp.create(result_types=[ty], properties={"value": attr}))

    def dense(self, values: np.ndarray, element: Attribute) -> SSAValue:
        """A `tg.constant` of the array `values` (its shape) with `element`: a splat where
        they are all equal (compared in NumPy: a large splat makes no Python list), else
        a dense one."""
        if values.size and np.all(values == values.flat[0]):
            return self.const(float(values.flat[0]), tensor(values.shape, element))
        ty = TensorType(element, list(values.shape))
        attr = DenseIntOrFPElementsAttr.from_list(ty, [float(v) for v in values.ravel()])  # type: ignore[arg-type]
        return self.emit(D.ConstantOp(attr, ty))

    def zeros_like(self, value: SSAValue) -> SSAValue:
        """`tg.constant 0.0` of the type of `value`."""
        return self.const(0.0, value)

    def shaped(
        self, cls: type[Operation], operands: Sequence[SSAValue], shape: Sequence[int], **props: Any
    ) -> SSAValue:
        """An op of `cls` with a result of `shape` and the first operand's element type."""
        ty = tensor_type(tuple(shape), element_type(operands[0]))
        return self.emit(cls.create(operands=operands, result_types=[ty], properties=props))

    # --- shapes ---------------------------------------------------------------------

    def broadcast_shape(self, what: str, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
        """NumPy's broadcast of two shapes, or an error naming `what`."""
        rank = max(len(a), len(b))
        pa, pb = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
        if any(x != y and x != 1 and y != 1 for x, y in zip(pa, pb)):
            raise self.fail(
                f"{what}: shapes cannot be broadcast together: {fmt_shape(a)} and {fmt_shape(b)}"
            )
        return tuple(max(x, y) if x != 0 and y != 0 else 0 for x, y in zip(pa, pb))

    def broadcast_together(
        self, what: str, xs: Sequence[SSAValue | float], element: Attribute | None = None
    ) -> list[SSAValue]:
        """`xs` broadcast to their common shape; numbers become splat constants of
        `element` (else the first tensor's element type)."""
        values = [x for x in xs if isinstance(x, SSAValue)]
        shape = shape_of(values[0])
        for v in values[1:]:
            shape = self.broadcast_shape(what, shape, shape_of(v))
        ty = tensor_type(shape, element or element_type(values[0]))
        return [
            self.broadcast(x, shape) if isinstance(x, SSAValue) else self.const(x, ty) for x in xs
        ]

    def normalize_dims(self, dim: int | Sequence[int] | None, rank: int, what: str) -> list[int]:
        """Dims as a sorted list of distinct non-negative ints (None: all dims)."""
        if dim is None:
            return list(range(rank))
        out = []
        for d in [dim] if isinstance(dim, int) else list(dim):
            if not -rank <= d < max(rank, 1):
                raise self.fail(f"{what}: dim {d} is out of range for a tensor of rank {rank}")
            out.append(d % rank if rank else 0)
        return sorted(set(out))

    # --- movement -------------------------------------------------------------------

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`tg.reshape` to `shape` (one dim may be -1), or `x` itself when it has `shape`."""
        old, shape = shape_of(x), [int(d) for d in shape]
        if shape.count(-1) > 1:
            raise self.fail(f"tg.reshape: only one dim may be -1, got {shape}")
        if -1 in shape:
            known, total = math.prod(d for d in shape if d != -1), math.prod(old)
            if known == 0 or total % known:
                raise self.fail(f"tg.reshape: cannot reshape {fmt_shape(old)} to {shape}")
            shape[shape.index(-1)] = total // known
        if tuple(shape) == old:
            return x
        return self.shaped(D.ReshapeOp, [x], shape)

    def broadcast(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`x` repeated to `shape` by NumPy's rules (leading 1s added by a reshape first),
        or `x` itself when it has `shape`."""
        old = shape_of(x)
        if old == tuple(shape):
            return x
        if len(old) < len(shape):
            x = self.reshape(x, (1,) * (len(shape) - len(old)) + old)
        return self.shaped(D.BroadcastOp, [x], shape)

    def expand_reduced(self, x: SSAValue, shape: Sequence[int], dims: Sequence[int]) -> SSAValue:
        """Broadcasts a reduction's result back over the reduced `dims` of `shape`."""
        return self.broadcast(self.reshape(x, keepdims_shape(shape, dims)), shape)

    def permute(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        """`tg.permute` (negative dims count from the end), or `x` for the identity."""
        rank = len(shape_of(x))
        perm = [p % rank if rank else p for p in perm]
        if sorted(perm) != list(range(rank)):
            raise self.fail(
                f"tg.permute: {list(perm)} is not a permutation of the dims of a rank-{rank} tensor"
            )
        if perm == list(range(rank)):
            return x
        shape = shape_of(x)
        return self.shaped(D.PermuteOp, [x], [shape[p] for p in perm], perm=i64s(tuple(perm)))

    def transpose(self, x: SSAValue, d0: int, d1: int) -> SSAValue:
        """Swaps dims `d0` and `d1`."""
        rank = len(shape_of(x))
        perm = list(range(rank))
        a = self.normalize_dims(d0, rank, "transpose")[0]
        b = self.normalize_dims(d1, rank, "transpose")[0]
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(x, perm)

    def transpose_last2(self, x: SSAValue) -> SSAValue:
        """Swaps the last two dims: `tg.permute %x perm=[0, 2, 1]` for rank 3."""
        return self.transpose(x, -2, -1)

    def slice(
        self,
        x: SSAValue,
        starts: Sequence[int],
        limits: Sequence[int],
        strides: Sequence[int] | None = None,
    ) -> SSAValue:
        strides = [1] * len(starts) if strides is None else strides
        return self.emit(D.SliceOp(x, list(starts), list(limits), list(strides)))

    def pad(
        self, x: SSAValue, low: Sequence[int], high: Sequence[int], value: float = 0.0
    ) -> SSAValue:
        """`tg.pad`, or `x` itself when no padding is asked for."""
        if not any(low) and not any(high):
            return x
        return self.emit(D.PadOp(x, list(low), list(high), value))

    def concat(self, xs: Sequence[SSAValue], dim: int) -> SSAValue:
        return self.emit(D.ConcatOp(list(xs), dim))

    def getitem(self, x: SSAValue, key: object) -> SSAValue:
        """Basic indexing: ints, slices with positive steps, `...` and `None`."""
        shape = shape_of(x)
        items = list(key) if isinstance(key, tuple) else [key]
        used = sum(1 for k in items if k is not None and k is not Ellipsis)
        if used > len(shape):
            raise self.fail(
                f"tg.slice: too many indices ({used}) for a tensor of rank {len(shape)}"
            )
        if any(k is Ellipsis for k in items):
            at = next(i for i, k in enumerate(items) if k is Ellipsis)
            items[at : at + 1] = [slice(None)] * (len(shape) - used)
        items += [slice(None)] * (len(shape) - sum(1 for k in items if k is not None))
        starts, limits, strides, out_shape = [], [], [], []
        dim = 0
        for k in items:
            if k is None:
                out_shape.append(1)
                continue
            n = shape[dim]
            if isinstance(k, int):
                if not -n <= k < n:
                    raise self.fail(
                        f"tg.slice: index {k} is out of range for dim {dim} of size {n}"
                    )
                k %= n
                starts.append(k), limits.append(k + 1), strides.append(1)
            elif isinstance(k, slice):
                lo, hi, st = k.indices(n)
                if st < 1:
                    raise self.fail(f"tg.slice: step must be positive, got {st}")
                hi = max(hi, lo)
                starts.append(lo), limits.append(hi), strides.append(st)
                out_shape.append(-(-(hi - lo) // st))
            else:
                raise self.fail(
                    f"tg.slice: unsupported index {k!r} (ints, slices, ... and None only)"
                )
            dim += 1
        if (starts, limits, strides) != ([0] * len(shape), list(shape), [1] * len(shape)):
            x = self.slice(x, starts, limits, strides)
        return self.reshape(x, out_shape)

    # --- reductions and contractions ------------------------------------------------

    def reduce(
        self,
        cls: type[C.ReduceOp],
        x: SSAValue,
        dims: int | Sequence[int] | None,
        keepdim: bool = False,
    ) -> SSAValue:
        """`tg.reduce_sum` / `tg.reduce_max` over `dims` (all when None), reduced dims
        kept as 1 with `keepdim`; a rank-0 `x` is its own reduction."""
        shape = shape_of(x)
        dims = self.normalize_dims(dims, len(shape), cls.name)
        if not shape:
            return x
        kept = [n for i, n in enumerate(shape) if i not in dims]
        out = self.shaped(cls, [x], kept, dims=i64s(tuple(dims)))
        return self.reshape(out, keepdims_shape(shape, dims)) if keepdim else out

    def reduce_sum(self, x: SSAValue, dims: int | Sequence[int] | None) -> SSAValue:
        return self.reduce(C.ReduceSumOp, x, dims)

    def reduce_max(self, x: SSAValue, dims: int | Sequence[int] | None) -> SSAValue:
        return self.reduce(C.ReduceMaxOp, x, dims)

    def dot(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """`tg.dot`: `[..., M, K] @ [..., K, N]`."""
        return self.shaped(C.DotOp, [a, b], shape_of(a)[:-1] + shape_of(b)[-1:])

    def matmul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """`a @ b` with NumPy's rules: vectors are promoted, batch dims broadcast."""
        sa, sb = shape_of(a), shape_of(b)
        if not sa or not sb:
            raise self.fail(
                f"tg.dot: matmul needs tensors of rank >= 1, got {fmt_shape(sa)} @ {fmt_shape(sb)}"
            )
        squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
        if squeeze_a:
            a = self.reshape(a, (1, sa[0]))
        if squeeze_b:
            b = self.reshape(b, (sb[0], 1))
        sa, sb = shape_of(a), shape_of(b)
        if len(sb) == 2 and len(sa) > 2:  # [..., M, K] @ [K, N]: one [(...) M, K] @ [K, N]
            flat = self.dot(self.reshape(a, (math.prod(sa[:-1]), sa[-1])), b)
            return self.reshape(flat, (*sa[:-1], sb[-1]) if not squeeze_b else sa[:-1])
        batch = self.broadcast_shape("tg.dot", sa[:-2], sb[:-2])
        a, b = self.broadcast(a, batch + sa[-2:]), self.broadcast(b, batch + sb[-2:])
        out = self.dot(a, b)
        shape = list(shape_of(out))
        if squeeze_b:
            shape.pop(-1)
        if squeeze_a:
            shape.pop(-1 if squeeze_b else -2)
        return self.reshape(out, shape)
