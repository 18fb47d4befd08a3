"""tg compute ops: masks, composites, contraction, reductions (see `gradfuse.dialects.tg`;
the elementwise arithmetic is in `tg_elementwise`).

Every op works on builtin ranked tensors (`tensor<2x255xf32>`); masks produced by
`tg.cmplt` are `tensor<...xi1>`. Broadcasting is explicit (`tg.broadcast`), so
elementwise ops take operands of one type. Ops verify their shapes and say what is
wrong in words, naming the op:

    %y = tg.dot %x, %w : tensor<2x255xf32>
    // tg.dot: inner dimensions differ: 2x255 @ 254x255
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, TensorType, i1, i64
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from gradfuse.dialects.tg_base import (
    TgCanonicalize,
    TgOp,
    fmt_shape,
    i64_array,
    ints,
    shape_of,
    tensor,
    tensor_like,
)
from gradfuse.dialects.tg_elementwise import BinaryOp, UnaryOp

# --- masks and composites -----------------------------------------------------------


@irdl_op_definition
class CmpLtOp(BinaryOp):
    """Elementwise `lhs < rhs` as a mask. `%m = tg.cmplt %x, %y : tensor<4xi1>`"""

    name = "tg.cmplt"
    RESULT_IS_MASK: ClassVar[bool] = True


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """Composite `1/(1+exp(-x))`. `%y = tg.sigmoid %x : tensor<4xf32>`"""

    name = "tg.sigmoid"


@irdl_op_definition
class TanhOp(UnaryOp):
    """Composite `tanh(x)`. `%y = tg.tanh %x : tensor<4xf32>`"""

    name = "tg.tanh"


@irdl_op_definition
class ReluOp(UnaryOp):
    """Composite `max(x, 0)`. `%y = tg.relu %x : tensor<4xf32>`"""

    name = "tg.relu"


@irdl_op_definition
class StopGradientOp(UnaryOp):
    """Composite identity through which no gradient flows (`Tensor.detach()`);
    `tg-decompose` removes it once `tg-autodiff` has run. `%y = tg.stop_gradient %x : tensor<4xf32>`
    """

    name = "tg.stop_gradient"


@irdl_op_definition
class WhereOp(TgOp):
    """`cond ? a : b` elementwise. `%z = tg.where %m, %a, %b : tensor<4xf32>`"""

    name = "tg.where"
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgCanonicalize())

    def __init__(self, cond: SSAValue, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[cond, lhs, rhs], result_types=[lhs.type])

    def verify_(self) -> None:
        cond = self.expect_tensor("condition", self.cond)
        if cond.element_type != i1:
            raise self.fail(f"condition must be a tensor of i1, got {cond}")
        if self.lhs.type != self.rhs.type or self.result.type != self.lhs.type:
            raise self.fail(
                f"branch and result types differ: {self.lhs.type}, {self.rhs.type}"
                f" -> {self.result.type}"
            )
        self.expect_shape("condition shape", shape_of(cond), shape_of(self.lhs))


@irdl_op_definition
class CastOp(TgOp):
    """Element type conversion. `%y = tg.cast %m : tensor<4xf32>` (from tensor<4xi1>)"""

    name = "tg.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgCanonicalize())

    def __init__(self, input: SSAValue, element: Attribute):
        super().__init__(operands=[input], result_types=[tensor(shape_of(input), element)])

    def verify_(self) -> None:
        self.expect_shape("result shape", shape_of(self.result), shape_of(self.input))


# --- contraction and reductions ---------------------------------------------------


@irdl_op_definition
class DotOp(TgOp):
    """Batched matrix product `[..., M, K] @ [..., K, N] -> [..., M, N]`.

    `%y = tg.dot %x, %w : tensor<2x255xf32>` (x: 2x254, w: 254x255)
    """

    name = "tg.dot"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgCanonicalize())
    FLOAT_OPERANDS: ClassVar[bool] = True
    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ("lhs", "rhs", "result")

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        a, b = shape_of(lhs), shape_of(rhs)
        super().__init__(operands=[lhs, rhs], result_types=[tensor_like(lhs, a[:-1] + b[-1:])])

    def verify_(self) -> None:
        a, b = shape_of(self.lhs), shape_of(self.rhs)
        if len(a) < 2 or len(a) != len(b):
            raise self.fail(
                f"operands must be matrices of one rank (>= 2): {fmt_shape(a)} @ {fmt_shape(b)}"
            )
        if a[-1] != b[-2]:
            raise self.fail(f"inner dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
        if a[:-2] != b[:-2]:
            raise self.fail(f"batch dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
        self.expect_shape("result shape", shape_of(self.result), a[:-1] + b[-1:])


class ReduceOp(TgOp):
    """Reduction over `dims`; the reduced dims are removed from the shape."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    dims = prop_def(DenseArrayBase)
    traits = traits_def(Pure(), TgCanonicalize())
    FLOAT_OPERANDS: ClassVar[bool] = True
    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ("input", "result")

    def __init__(self, input: SSAValue, dims: Sequence[int]):
        shape = shape_of(input)
        kept = [d for i, d in enumerate(shape) if i not in dims]
        super().__init__(
            operands=[input],
            result_types=[tensor_like(input, kept)],
            properties={"dims": i64_array(sorted(dims))},
        )

    def verify_(self) -> None:
        shape, dims = shape_of(self.input), ints(self.dims)
        if list(dims) != sorted(set(dims)) or any(d < 0 or d >= len(shape) for d in dims):
            raise self.fail(
                f"dims {list(dims)} must be distinct, ascending and within rank {len(shape)}"
            )
        kept = [d for i, d in enumerate(shape) if i not in dims]
        self.expect_shape("result shape", shape_of(self.result), kept)


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum over dims. `%s = tg.reduce_sum %x dims=[1] : tensor<2xf32>` (x: 2x255)"""

    name = "tg.reduce_sum"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over dims. `%s = tg.reduce_max %x dims=[0, 1] : tensor<f32>`"""

    name = "tg.reduce_max"


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Composite mean over dims (`tg-decompose`: reduce_sum times 1/n).

    `%m = tg.reduce_mean %x dims=[1] : tensor<2xf32>` (x: 2x255)
    """

    name = "tg.reduce_mean"


@irdl_op_definition
class SoftmaxOp(TgOp):
    """Composite softmax along `dim`. `%y = tg.softmax %x dim=1 : tensor<2x8xf32>`"""

    name = "tg.softmax"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr)
    traits = traits_def(Pure(), TgCanonicalize())
    FLOAT_OPERANDS: ClassVar[bool] = True

    def __init__(self, input: SSAValue, dim: int):
        super().__init__(
            operands=[input], result_types=[input.type], properties={"dim": IntegerAttr(dim, i64)}
        )

    def verify_(self) -> None:
        self.check_dim(len(shape_of(self.input)))
        if self.result.type != self.input.type:
            raise self.fail(f"result type {self.result.type} differs from {self.input.type}")
