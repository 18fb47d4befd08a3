"""Small helpers that emit tg ops at a builder's insertion point, all with one location.

Passes that expand one op into many (`tg-decompose`, `tg-autodiff`) build through an
`Emitter`, so every new op carries the location (provenance) it should:

    e = Emitter(rewriter, op.location)
    one = e.const(1.0, x)            // %c = tg.constant 1.0 : tensor<4xf32>
    y = e.add(x, one)                // %y = tg.add %x, %c : tensor<4xf32>
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from xdsl.builder import Builder
from xdsl.dialects.builtin import DenseArrayBase, FloatAttr, TensorType, f64, i1
from xdsl.ir import Attribute, Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import i64_array, shape_of, tensor


def element_type(value: SSAValue) -> Attribute:
    """The element type of a tensor value (`f32` for `tensor<2x3xf32>`)."""
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.element_type


def _f64(value: float) -> FloatAttr:
    """The f64 `FloatAttr` of a splat `tg.constant` (shared: constants repeat)."""
    return _f64_signed(value, math.copysign(1.0, value))  # 0.0 == -0.0 as keys


@lru_cache(maxsize=1024)
def _f64_signed(value: float, sign: float) -> FloatAttr:
    return FloatAttr(value, f64)


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


class Emitter:
    """Inserts tg ops through `builder`, each with `location`; methods return the result.

    `Emitter(rewriter, loc).mul(x, e.const(2.0, x))` emits
    `%c = tg.constant 2.0` and `%y = tg.mul %x, %c`, both at `loc`.
    """

    def __init__(
        self, builder: Builder, location: Attribute, emitted: list[Operation] | None = None
    ):
        self.builder = builder
        self.location = location
        self.emitted = [] if emitted is None else emitted
        """Every op this emitter inserted, in order (a list that emitters may share)."""

    def at(self, location: Attribute) -> Emitter:
        """An emitter at the same insertion point, recording into the same list."""
        return Emitter(self.builder, location, self.emitted)

    def emit(self, op: Operation) -> SSAValue:
        """Inserts `op` with this emitter's location and returns its only result."""
        op.location = self.location
        self.builder.insert(op)
        self.emitted.append(op)
        return op.results[0]

    # --- constants --------------------------------------------------------------

    def const(self, value: float, like: SSAValue | TensorType) -> SSAValue:
        """A splat `tg.constant` of the type of `like` (a value or a tensor type)."""
        ty = like.type if isinstance(like, SSAValue) else like
        assert isinstance(ty, TensorType)
        attr = _f64(float(value))  # as the constructor builds it, without its checks
        return self.emit(tg.ConstantOp.create(result_types=[ty], properties={"value": attr}))

    def zeros_like(self, value: SSAValue) -> SSAValue:
        """`tg.constant 0.0` of the type of `value`."""
        return self.const(0.0, value)

    # --- elementwise ------------------------------------------------------------

    def elementwise(self, cls: type[Operation], *operands: SSAValue) -> SSAValue:
        """An elementwise tg op whose result has its first operand's type (all but
        tg.cmplt), built as its constructor builds it without the generic checks."""
        return self.emit(cls.create(operands=operands, result_types=[operands[0].type]))

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.elementwise(tg.AddOp, a, b)

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.elementwise(tg.SubOp, a, b)

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.elementwise(tg.MulOp, a, b)

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.elementwise(tg.DivOp, a, b)

    def max(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.elementwise(tg.MaxOp, a, b)

    def cmplt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.CmpLtOp(a, b))

    def neg(self, x: SSAValue) -> SSAValue:
        return self.elementwise(tg.NegOp, x)

    def exp2(self, x: SSAValue) -> SSAValue:
        return self.elementwise(tg.Exp2Op, x)

    def log2(self, x: SSAValue) -> SSAValue:
        return self.elementwise(tg.Log2Op, x)

    def sqrt(self, x: SSAValue) -> SSAValue:
        return self.elementwise(tg.SqrtOp, x)

    def recip(self, x: SSAValue) -> SSAValue:
        return self.elementwise(tg.RecipOp, x)

    def sin(self, x: SSAValue) -> SSAValue:
        return self.elementwise(tg.SinOp, x)

    def where(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.WhereOp(cond, a, b))

    def cast(self, x: SSAValue, element: Attribute) -> SSAValue:
        return self.emit(tg.CastOp(x, element))

    def scale(self, x: SSAValue, factor: float) -> SSAValue:
        """`x * factor` with a splat constant."""
        return self.mul(x, self.const(factor, x))

    def mask_to_float(self, mask: SSAValue, like: SSAValue) -> SSAValue:
        """An i1 mask as 1.0 / 0.0 in the element type of `like`."""
        assert element_type(mask) == i1
        return self.cast(mask, element_type(like))

    # --- contraction, reductions, movement -------------------------------------

    # These build each op as its constructor does (same result type and properties),
    # through `create` and shared types: the generic constructors cost 3x (hot path).

    def shaped(
        self, cls: type[Operation], operands: Sequence[SSAValue], shape: Sequence[int], **props: Any
    ) -> SSAValue:
        """An op of `cls` with a result of `shape` and the first operand's element type."""
        ty = tensor_type(tuple(shape), element_type(operands[0]))
        return self.emit(cls.create(operands=operands, result_types=[ty], properties=props))

    def dot(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.shaped(tg.DotOp, [a, b], shape_of(a)[:-1] + shape_of(b)[-1:])

    def reduce_sum(self, x: SSAValue, dims: Sequence[int]) -> SSAValue:
        return self.reduce(tg.ReduceSumOp, x, dims)

    def reduce_max(self, x: SSAValue, dims: Sequence[int]) -> SSAValue:
        return self.reduce(tg.ReduceMaxOp, x, dims)

    def reduce(self, cls: type[Operation], x: SSAValue, dims: Sequence[int]) -> SSAValue:
        kept = [n for i, n in enumerate(shape_of(x)) if i not in dims]
        return self.shaped(cls, [x], kept, dims=i64s(tuple(sorted(dims))))

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`tg.reshape`, or `x` itself when it already has `shape`."""
        if shape_of(x) == tuple(shape):
            return x
        return self.shaped(tg.ReshapeOp, [x], shape)

    def permute(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        shape = shape_of(x)
        return self.shaped(tg.PermuteOp, [x], [shape[p] for p in perm], perm=i64s(tuple(perm)))

    def transpose_last2(self, x: SSAValue) -> SSAValue:
        """Swaps the last two dims: `tg.permute %x perm=[0, 2, 1]` for rank 3."""
        rank = len(shape_of(x))
        return self.permute(x, [*range(rank - 2), rank - 1, rank - 2])

    def broadcast(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`tg.broadcast`, or `x` itself when it already has `shape`."""
        if shape_of(x) == tuple(shape):
            return x
        return self.shaped(tg.BroadcastOp, [x], shape)

    def expand_reduced(self, x: SSAValue, shape: Sequence[int], dims: Sequence[int]) -> SSAValue:
        """Broadcasts a reduction's result back over the reduced `dims` of `shape`."""
        return self.broadcast(self.reshape(x, keepdims_shape(shape, dims)), shape)

    def slice(
        self,
        x: SSAValue,
        starts: Sequence[int],
        limits: Sequence[int],
        strides: Sequence[int] | None = None,
    ) -> SSAValue:
        strides = [1] * len(starts) if strides is None else strides
        return self.emit(tg.SliceOp(x, list(starts), list(limits), list(strides)))

    def pad(
        self, x: SSAValue, low: Sequence[int], high: Sequence[int], value: float = 0.0
    ) -> SSAValue:
        """`tg.pad`, or `x` itself when no padding is asked for."""
        if not any(low) and not any(high):
            return x
        return self.emit(tg.PadOp(x, list(low), list(high), value))

    def concat(self, xs: Sequence[SSAValue], dim: int) -> SSAValue:
        return self.emit(tg.ConcatOp(list(xs), dim))
