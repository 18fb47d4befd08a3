"""tg data ops: constants and data movement (all free after `tg-lower-access`)."""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil, prod

from xdsl.dialects.builtin import (
    AffineMapAttr,
    AffineSetAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.ir.affine import AffineMap, AffineSet
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import ConstantLike, Pure

from gradfuse.dialects.tg_base import (
    TgCanonicalize,
    TgOp,
    access_properties,
    fmt_shape,
    i64_array,
    ints,
    shape_of,
    tensor_like,
)


class TgConstantLike(ConstantLike):
    """Lets xDSL's folding and CSE see tg.constant as a constant."""

    @classmethod
    def get_constant_value(cls, op) -> Attribute:  # type: ignore[override]
        return op.value


@irdl_op_definition
class ConstantOp(TgOp):
    """A splat or dense constant.

    `%c = tg.constant 1.0 : tensor<2x255xf32>` or
    `%d = tg.constant dense<[1.0, 2.0]> : tensor<2xf32>`
    """

    name = "tg.constant"
    value = prop_def(FloatAttr | DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgConstantLike())

    def __init__(self, value: float | DenseIntOrFPElementsAttr, type: TensorType):
        attr = value if isinstance(value, DenseIntOrFPElementsAttr) else FloatAttr(value, f64)
        super().__init__(result_types=[type], properties={"value": attr})

    @property
    def is_splat(self) -> bool:
        return isinstance(self.value, FloatAttr)

    def verify_(self) -> None:
        if isinstance(self.value, FloatAttr):
            self.expect_splat("a splat", self.value.value.data, self.result.type)
        if isinstance(self.value, DenseIntOrFPElementsAttr):
            got = tuple(self.value.get_shape())
            self.expect_shape("dense value shape", got, shape_of(self.result))
            if self.value.get_element_type() != self.result.type.element_type:  # type: ignore[union-attr]
                raise self.fail(
                    f"dense value type {self.value.type} differs from {self.result.type}"
                )


class ViewOp(TgOp):
    """A data-movement op with one input; subclasses say the result shape."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgCanonicalize())

    def verify_element_type(self) -> None:
        if self.input.type.element_type != self.result.type.element_type:  # type: ignore[union-attr]
            raise self.fail(f"element type changes: {self.input.type} -> {self.result.type}")


@irdl_op_definition
class ReshapeOp(ViewOp):
    """Same elements, new shape. `%y = tg.reshape %x : tensor<1x255xf32>` (x: 255)"""

    name = "tg.reshape"

    def __init__(self, input: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[input], result_types=[tensor_like(input, shape)])

    def verify_(self) -> None:
        self.verify_element_type()
        a, b = shape_of(self.input), shape_of(self.result)
        if prod(a) != prod(b):
            raise self.fail(
                f"cannot reshape {fmt_shape(a)} ({prod(a)} elements) to {fmt_shape(b)} ({prod(b)} elements)"
            )


@irdl_op_definition
class PermuteOp(ViewOp):
    """Transpose by `perm`: result dim i is input dim perm[i].

    `%y = tg.permute %x perm=[1, 0] : tensor<255x2xf32>` (x: 2x255)
    """

    name = "tg.permute"
    perm = prop_def(DenseArrayBase)

    def __init__(self, input: SSAValue, perm: Sequence[int]):
        shape = shape_of(input)
        super().__init__(
            operands=[input],
            result_types=[tensor_like(input, [shape[p] for p in perm])],
            properties={"perm": i64_array(perm)},
        )

    def verify_(self) -> None:
        self.verify_element_type()
        shape, perm = shape_of(self.input), ints(self.perm)
        if sorted(perm) != list(range(len(shape))):
            raise self.fail(f"perm {list(perm)} is not a permutation of 0..{len(shape) - 1}")
        self.expect_shape("result shape", shape_of(self.result), [shape[p] for p in perm])


@irdl_op_definition
class BroadcastOp(ViewOp):
    """Repeat size-1 dims up to the result shape (same rank).

    `%y = tg.broadcast %x : tensor<2x255xf32>` (x: 1x255)
    """

    name = "tg.broadcast"

    def __init__(self, input: SSAValue, shape: Sequence[int]):
        super().__init__(operands=[input], result_types=[tensor_like(input, shape)])

    def verify_(self) -> None:
        self.verify_element_type()
        a, b = shape_of(self.input), shape_of(self.result)
        if len(a) != len(b) or any(x != y and x != 1 for x, y in zip(a, b)):
            raise self.fail(
                f"cannot broadcast {fmt_shape(a)} to {fmt_shape(b)}:"
                " ranks must match and each dim must be equal or 1 (reshape first)"
            )


@irdl_op_definition
class SliceOp(ViewOp):
    """Strided window `[start:limit:stride]` per dim.

    `%y = tg.slice %x starts=[0, 1] limits=[2, 9] strides=[1, 2] : tensor<2x4xf32>`
    """

    name = "tg.slice"
    starts = prop_def(DenseArrayBase)
    limits = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)

    def __init__(
        self, input: SSAValue, starts: Sequence[int], limits: Sequence[int], strides: Sequence[int]
    ):
        shape = [ceil((hi - lo) / st) for lo, hi, st in zip(starts, limits, strides)]
        super().__init__(
            operands=[input],
            result_types=[tensor_like(input, shape)],
            properties={
                "starts": i64_array(starts),
                "limits": i64_array(limits),
                "strides": i64_array(strides),
            },
        )

    def verify_(self) -> None:
        self.verify_element_type()
        shape = shape_of(self.input)
        starts, limits, strides = ints(self.starts), ints(self.limits), ints(self.strides)
        if not len(starts) == len(limits) == len(strides) == len(shape):
            raise self.fail(f"starts, limits and strides need {len(shape)} entries each")
        for d, (lo, hi, st, n) in enumerate(zip(starts, limits, strides, shape)):
            if not (0 <= lo <= hi <= n and st >= 1):
                raise self.fail(f"dim {d}: [{lo}:{hi}:{st}] is not a valid slice of size {n}")
        want = [ceil((hi - lo) / st) for lo, hi, st in zip(starts, limits, strides)]
        self.expect_shape("result shape", shape_of(self.result), want)


@irdl_op_definition
class PadOp(ViewOp):
    """Pad each dim with `low` / `high` copies of `value`.

    `%y = tg.pad %x low=[0, 1] high=[0, 1] value=0.0 : tensor<2x6xf32>` (x: 2x4)
    """

    name = "tg.pad"
    low = prop_def(DenseArrayBase)
    high = prop_def(DenseArrayBase)
    value = prop_def(FloatAttr)

    def __init__(
        self, input: SSAValue, low: Sequence[int], high: Sequence[int], value: float = 0.0
    ):
        shape = [n + lo + hi for n, lo, hi in zip(shape_of(input), low, high)]
        super().__init__(
            operands=[input],
            result_types=[tensor_like(input, shape)],
            properties={
                "low": i64_array(low),
                "high": i64_array(high),
                "value": FloatAttr(value, f64),
            },
        )

    def verify_(self) -> None:
        self.verify_element_type()
        shape, low, high = shape_of(self.input), ints(self.low), ints(self.high)
        if not len(low) == len(high) == len(shape):
            raise self.fail(f"low and high need {len(shape)} entries each")
        if any(v < 0 for v in low + high):
            raise self.fail(f"padding must not be negative: low={list(low)} high={list(high)}")
        want = [n + lo + hi for n, lo, hi in zip(shape, low, high)]
        self.expect_shape("result shape", shape_of(self.result), want)


@irdl_op_definition
class ConcatOp(TgOp):
    """Join tensors along `dim`. `%y = tg.concat %a, %b dim=0 : tensor<4x3xf32>`"""

    name = "tg.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr)
    traits = traits_def(Pure(), TgCanonicalize())

    def __init__(self, inputs: Sequence[SSAValue], dim: int):
        shapes = [shape_of(v) for v in inputs]
        shape = list(shapes[0])
        shape[dim] = sum(s[dim] for s in shapes)
        super().__init__(
            operands=[inputs],
            result_types=[tensor_like(inputs[0], shape)],
            properties={"dim": IntegerAttr(dim, i64)},
        )

    def verify_(self) -> None:
        if not self.inputs:
            raise self.fail("needs at least one input")
        shapes = [shape_of(v) for v in self.inputs]
        rank = len(shapes[0])
        dim = self.check_dim(rank)
        for s, v in zip(shapes, self.inputs):
            if len(s) != rank or any(
                a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != dim
            ):
                raise self.fail(
                    f"inputs must agree except in dim {dim}: {fmt_shape(shapes[0])} and {fmt_shape(s)}"
                )
            if v.type.element_type != self.result.type.element_type:  # type: ignore[union-attr]
                raise self.fail(f"element types differ: {v.type} and {self.result.type}")
        want = list(shapes[0])
        want[dim] = sum(s[dim] for s in shapes)
        self.expect_shape("result shape", shape_of(self.result), want)


@irdl_op_definition
class ViewAccessOp(ViewOp):
    """A view as an affine access map: `result[i] = input[map(i)]`, and 0 where an
    optional `guard` (an affine set of result indices) does not hold.

    Made by `tg-lower-access` from reshape/permute/broadcast/slice chains; a zero
    padding is a guarded view.
    `%y = tg.view %b map=affine_map<(d0, d1) -> (d1)> : tensor<2x255xf32>` (b: 255)
    """

    name = "tg.view"
    map = prop_def(AffineMapAttr)
    guard = opt_prop_def(AffineSetAttr)

    def __init__(
        self, input: SSAValue, map: AffineMap, shape: Sequence[int], guard: AffineSet | None = None
    ):
        super().__init__(
            operands=[input],
            result_types=[tensor_like(input, shape)],
            properties=access_properties(map, guard),
        )

    def verify_(self) -> None:
        self.verify_element_type()
        m = self.map.data
        rank_in, rank_out = len(shape_of(self.input)), len(shape_of(self.result))
        if m.num_dims != rank_out or len(m.results) != rank_in or m.num_symbols:
            raise self.fail(
                f"map {m} must take {rank_out} dims (the result rank) and give"
                f" {rank_in} indices (the input rank)"
            )
        if self.guard is not None and self.guard.data.num_dims != rank_out:
            raise self.fail(f"guard {self.guard.data} must take {rank_out} dims")


__all__ = [
    "ConstantOp", "ReshapeOp", "PermuteOp", "BroadcastOp", "SliceOp", "PadOp", "ConcatOp",
    "ViewAccessOp",
]  # fmt: skip
