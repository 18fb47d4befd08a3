"""tg collective ops: what the ranks of a data-parallel run compute together.

`tg.allreduce` is the one collective: every rank gives a tensor of the same type and
gets back their elementwise sum (`reduce="sum"`) or mean over the ranks
(`reduce="mean"`), as `MPI_Allreduce` and `ncclAllReduce` do. In a run of one process
it is the identity. Like a feeder or a receiver it is a host action between kernels
(fusion never moves work across it), and every rank runs the same program, so the
ranks meet at each all-reduce in the same order.

    %g = tg.allreduce %flat reduce="mean" : tensor<1024xf32>

Its pieces, by where they live:
- shape rule: `AllReduceOp.verify_` (the result has the operand's type);
- derivative: `allreduce_rule` (`passes/lib/derivatives.py`): the all-reduce of the
  cotangent, with the same reduction (y_r = sum_s x_s: dL/dx_s = sum_r dL/dy_r);
- reference implementation: `run_allreduce` (`backend/interpreters/tg_ops.py`) through
  `gradfuse.distributed`'s communicator (mpi4py);
- code: `kernel.allreduce` (`dialects/kernel_host.py`), called as
  `gradfuse_allreduce` from the host program (`MPI_Allreduce` in the c backend's C).
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import MemoryWriteEffect

from gradfuse.dialects.tg_base import TgOp

REDUCTIONS = ("sum", "mean")
"""What `tg.allreduce` computes over the ranks."""


@irdl_op_definition
class AllReduceOp(TgOp):
    """The elementwise sum (or mean) of `input` over the ranks of the run, on every rank.

    `%g = tg.allreduce %x reduce="sum" : tensor<2x255xf32>`
    """

    name = "tg.allreduce"
    input = operand_def(TensorType)
    reduce = prop_def(StringAttr)
    result = result_def(TensorType)
    traits = traits_def(MemoryWriteEffect())  # a host action: never merged, moved or dropped
    FLOAT_OPERANDS: ClassVar[bool] = True

    def __init__(self, input: SSAValue, reduce: str = "sum"):
        super().__init__(
            operands=[input], result_types=[input.type], properties={"reduce": StringAttr(reduce)}
        )

    def verify_(self) -> None:
        if self.reduce.data not in REDUCTIONS:
            raise self.fail(
                f'reduce="{self.reduce.data}" is not a reduction over ranks'
                f" (choose from {', '.join(REDUCTIONS)})"
            )
        if self.result.type != self.input.type:
            raise self.fail(
                f"result type {self.result.type} differs from the operand's {self.input.type}"
            )
