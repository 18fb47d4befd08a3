"""Small helpers that emit tg ops at a builder's insertion point, all with one location.

Passes that expand one op into many (`tg-decompose`, `tg-autodiff`) build through an
`Emitter`, so every new op carries the location (provenance) it should:

    e = Emitter(rewriter, op.location)
    one = e.const(1.0, x)            // %c = tg.constant 1.0 : tensor<4xf32>
    y = e.add(x, one)                // %y = tg.add %x, %c : tensor<4xf32>
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.builder import Builder
from xdsl.dialects.builtin import TensorType, i1
from xdsl.ir import Attribute, Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of


def element_type(value: SSAValue) -> Attribute:
    """The element type of a tensor value (`f32` for `tensor<2x3xf32>`)."""
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.element_type


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
        return self.emit(tg.ConstantOp(float(value), ty))

    def zeros_like(self, value: SSAValue) -> SSAValue:
        """`tg.constant 0.0` of the type of `value`."""
        return self.const(0.0, value)

    # --- elementwise ------------------------------------------------------------

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.AddOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.SubOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.MulOp(a, b))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.DivOp(a, b))

    def max(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.MaxOp(a, b))

    def cmplt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.CmpLtOp(a, b))

    def neg(self, x: SSAValue) -> SSAValue:
        return self.emit(tg.NegOp(x))

    def exp2(self, x: SSAValue) -> SSAValue:
        return self.emit(tg.Exp2Op(x))

    def log2(self, x: SSAValue) -> SSAValue:
        return self.emit(tg.Log2Op(x))

    def sqrt(self, x: SSAValue) -> SSAValue:
        return self.emit(tg.SqrtOp(x))

    def recip(self, x: SSAValue) -> SSAValue:
        return self.emit(tg.RecipOp(x))

    def sin(self, x: SSAValue) -> SSAValue:
        return self.emit(tg.SinOp(x))

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

    def dot(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(tg.DotOp(a, b))

    def reduce_sum(self, x: SSAValue, dims: Sequence[int]) -> SSAValue:
        return self.emit(tg.ReduceSumOp(x, list(dims)))

    def reduce_max(self, x: SSAValue, dims: Sequence[int]) -> SSAValue:
        return self.emit(tg.ReduceMaxOp(x, list(dims)))

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`tg.reshape`, or `x` itself when it already has `shape`."""
        if shape_of(x) == tuple(shape):
            return x
        return self.emit(tg.ReshapeOp(x, list(shape)))

    def permute(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        return self.emit(tg.PermuteOp(x, list(perm)))

    def transpose_last2(self, x: SSAValue) -> SSAValue:
        """Swaps the last two dims: `tg.permute %x perm=[0, 2, 1]` for rank 3."""
        rank = len(shape_of(x))
        return self.permute(x, [*range(rank - 2), rank - 1, rank - 2])

    def broadcast(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`tg.broadcast`, or `x` itself when it already has `shape`."""
        if shape_of(x) == tuple(shape):
            return x
        return self.emit(tg.BroadcastOp(x, list(shape)))

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
