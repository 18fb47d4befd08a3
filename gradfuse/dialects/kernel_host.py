"""Host ops of the `kernel` dialect: named params, temporaries, constants, host
callbacks, all-reduces over the ranks and the counted loop around them.

%w = kernel.param "fc.weight" : memref<4x4xf32>
"kernel.for"() <{lower = 0 : i64, upper = 1000 : i64, step = 1 : i64}> ({
^bb0(%i: index):
  %t = kernel.alloc : memref<2x4xf32>
  kernel.feed "x", %t : memref<2x4xf32>
  "kernel.yield"() : () -> ()
}) : () -> ()
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import HasParent, IsTerminator, MemoryWriteEffect, Pure, RecursiveMemoryEffect

from gradfuse.dialects.tg_base import CountedLoop, fail


@irdl_op_definition
class ParamOp(IRDLOperation):
    """The persistent buffer of a named parameter.

    `%w = kernel.param "fc.weight" : memref<4x4xf32>`
    """

    name = "kernel.param"
    key = prop_def(StringAttr)
    init = opt_prop_def(FloatAttr | DenseIntOrFPElementsAttr)
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = "$key attr-dict `:` type($result)"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, key: str, type: MemRefType, init: Attribute | None = None):
        props: dict[str, Attribute] = {"key": StringAttr(key)}
        if init is not None:
            props["init"] = init
        super().__init__(result_types=[type], properties=props)


@irdl_op_definition
class AllocOp(IRDLOperation):
    """A temporary buffer; buffer planning gives it an `offset` in one arena.

    `%t = kernel.alloc : memref<2x255xf32>`
    """

    name = "kernel.alloc"
    offset = opt_prop_def(IntegerAttr)
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, type: MemRefType):
        super().__init__(result_types=[type])


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A read-only buffer holding dense data.

    `%c = kernel.constant dense<[1.0, 2.0]> : memref<2xf32>`
    """

    name = "kernel.constant"
    value = prop_def(DenseIntOrFPElementsAttr | FloatAttr)
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `:` type($result)"

    def __init__(self, value: Attribute, type: MemRefType):
        super().__init__(result_types=[type], properties={"value": value})


@irdl_op_definition
class FeedOp(IRDLOperation):
    """Fills `buffer` from the host callback `key` (host -> device).

    `kernel.feed "images", %x : memref<2x255xf32>`
    """

    name = "kernel.feed"
    key = prop_def(StringAttr)
    buffer = operand_def(MemRefType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$key `,` $buffer attr-dict `:` type($buffer)"

    def __init__(self, key: str, buffer: SSAValue):
        super().__init__(operands=[buffer], properties={"key": StringAttr(key)})


@irdl_op_definition
class ReceiveOp(IRDLOperation):
    """Hands `buffers` to the host callback `key` (device -> host).

    `kernel.receive "loss", %l : memref<f32>`
    """

    name = "kernel.receive"
    key = prop_def(StringAttr)
    buffers = var_operand_def(MemRefType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$key (`,` $buffers^ `:` type($buffers))? attr-dict"

    def __init__(self, key: str, buffers: Sequence[SSAValue]):
        super().__init__(operands=[buffers], properties={"key": StringAttr(key)})


@irdl_op_definition
class AllReduceOp(IRDLOperation):
    """`target` gets the sum (or mean) over the ranks of `source` (`tg.allreduce`), on
    the host between launches (`MPI_Allreduce`).

    `kernel.allreduce "mean", %g, %avg : memref<1024xf32>, memref<1024xf32>`
    """

    name = "kernel.allreduce"
    reduce = prop_def(StringAttr)
    source = operand_def(MemRefType)
    target = operand_def(MemRefType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = (
        "$reduce `,` $source `,` $target attr-dict `:` type($source) `,` type($target)"
    )

    def __init__(self, reduce: str, source: SSAValue, target: SSAValue):
        super().__init__(operands=[source, target], properties={"reduce": StringAttr(reduce)})


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a `kernel.for` body (host loops carry no values at kernel level).

    `"kernel.yield"() : () -> ()`
    """

    name = "kernel.yield"
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(ForOp), Pure()))

    def __init__(self) -> None:
        super().__init__()


@irdl_op_definition
class ForOp(CountedLoop):
    """Runs its body (host ops and launches) for `lower <= i < upper` by `step`.

    The body's one argument is the induction variable; it ends with `kernel.yield`:

    ```
    "kernel.for"() <{lower = 0 : i64, upper = 1000 : i64, step = 1 : i64}> ({
    ^bb0(%i: index):
      kernel.feed "x", %x : memref<2x8xf32>
      "kernel.yield"() : () -> ()
    }) : () -> ()
    ```
    """

    name = "kernel.for"
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, lower: int, upper: int, step: int, body: Region | None = None):
        super().__init__(
            regions=[body or Region(Block(arg_types=[IndexType()]))],
            properties=self.bound_properties(lower, upper, step),
        )

    def verify_(self) -> None:
        self.verify_step()
        block = self.body.block
        if [a.type for a in block.args] != [IndexType()]:
            raise fail(
                self,
                "the body's one argument must be the induction variable (index),"
                f" got {len(block.args)} arguments",
            )
        if not isinstance(block.last_op, YieldOp):
            raise fail(self, "body must end with kernel.yield")
