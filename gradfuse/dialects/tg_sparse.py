"""tg ops with data-dependent indices, and random numbers (see `gradfuse.dialects.tg`).

`tg.gather` and `tg.scatter_add` follow `torch.gather` / `Tensor.scatter_add_`
along one dim, with integer indices held in float tensors (feeders give f32);
`tg.random` draws uniform numbers from a counter-based generator (Philox2x32-10)
keyed by `seed`, so every backend produces the same numbers:

    %e = tg.gather %table, %idx dim=0 : tensor<6x16xf32>     // embedding rows
    %g = tg.scatter_add %idx, %ge dim=0 : tensor<100x16xf32> // its gradient
    %u = tg.random %counter seed=7 : tensor<2x16xf32>        // uniform [0, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, TensorType, f32, i64
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from gradfuse.dialects.tg_base import TgOp, fmt_shape, shape_of, tensor, tensor_like


class IndexedOp(TgOp):
    """Shared checks of gather and scatter_add: `dim` in range, indices of floats."""

    FLOAT_OPERANDS: ClassVar[bool] = True

    def check_index(self, index: SSAValue, other: Sequence[int], dim: int, what: str) -> None:
        shape = shape_of(index)
        if len(shape) != len(other):
            raise self.fail(f"index rank {len(shape)} differs from the {what} rank {len(other)}")
        for d, (a, b) in enumerate(zip(shape, other)):
            if d != dim and a > b:
                raise self.fail(
                    f"index {fmt_shape(shape)} is larger than the {what} {fmt_shape(other)}"
                    f" in dim {d}"
                )


@irdl_op_definition
class GatherOp(IndexedOp):
    """`out[i] = input[i with i[dim] := index[i]]`; the result has the index's shape.

    `%y = tg.gather %x, %idx dim=1 : tensor<4x1xf32>` (x: 4x10, idx: 4x1)
    """

    name = "tg.gather"
    input = operand_def(TensorType)
    index = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr)
    traits = traits_def(Pure())
    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ("input", "result")

    def __init__(self, input: SSAValue, index: SSAValue, dim: int):
        super().__init__(
            operands=[input, index],
            result_types=[tensor_like(input, shape_of(index))],
            properties={"dim": IntegerAttr(dim, i64)},
        )

    def verify_(self) -> None:
        shape = shape_of(self.input)
        dim = self.check_dim(len(shape))
        self.check_index(self.index, shape, dim, "input")
        self.expect_shape("result shape", shape_of(self.result), shape_of(self.index))


@irdl_op_definition
class ScatterAddOp(IndexedOp):
    """Zeros of the result type, then `out[i with i[dim] := index[i]] += src[i]`.

    `%g = tg.scatter_add %idx, %src dim=0 : tensor<10x4xf32>` (idx, src: 6x4)
    """

    name = "tg.scatter_add"
    index = operand_def(TensorType)
    src = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr)
    traits = traits_def(Pure())
    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ("src", "result")

    def __init__(self, index: SSAValue, src: SSAValue, dim: int, shape: Sequence[int]):
        super().__init__(
            operands=[index, src],
            result_types=[tensor_like(src, shape)],
            properties={"dim": IntegerAttr(dim, i64)},
        )

    def verify_(self) -> None:
        shape = shape_of(self.result)
        dim = self.check_dim(len(shape))
        if shape_of(self.index) != shape_of(self.src):
            raise self.fail(
                f"index {fmt_shape(shape_of(self.index))} and source"
                f" {fmt_shape(shape_of(self.src))} differ in shape"
            )
        self.check_index(self.index, shape, dim, "result")


@irdl_op_definition
class RandomOp(TgOp):
    """Uniform [0, 1) f32 numbers from Philox2x32-10 keyed by `seed`, at counter
    (element index, `counter`): give a new `counter` (a rank-0 tensor) each run.

    `%u = tg.random %c seed=7 : tensor<2x16xf32>` (c: tensor<f32>)
    """

    name = "tg.random"
    counter = operand_def(TensorType)
    result = result_def(TensorType)
    seed = prop_def(IntegerAttr)

    def __init__(self, counter: SSAValue, seed: int, shape: Sequence[int]):
        super().__init__(
            operands=[counter],
            result_types=[tensor(shape, f32)],
            properties={"seed": IntegerAttr(seed, i64)},
        )

    def verify_(self) -> None:
        if shape_of(self.counter) != ():
            raise self.fail(f"counter must be a rank-0 tensor, got {self.counter.type}")
        if self.result.type.element_type != f32:  # type: ignore[attr-defined]
            raise self.fail(f"result must be a tensor of f32, got {self.result.type}")
        if not 0 <= self.seed.value.data < 2**32:
            raise self.fail(f"seed must fit in 32 bits, got {self.seed.value.data}")


__all__ = ["GatherOp", "ScatterAddOp", "RandomOp"]
