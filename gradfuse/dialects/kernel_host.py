"""Host ops of the `kernel` dialect: named params, temporaries, constants, host callbacks.

%w = kernel.param "fc.weight" : memref<4x4xf32>
%t = kernel.alloc : memref<2x4xf32>
kernel.feed "x", %t : memref<2x4xf32>
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import MemoryWriteEffect, Pure


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
