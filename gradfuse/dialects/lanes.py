"""The `lanes` dialect: a comparison and a choice lane by lane, on `vector<Wxi1>` masks.

MLIR's `arith.cmpf` and `arith.select` take vectors (`vector<8xf32>` compared into
`vector<8xi1>`, a select by a `vector<8xi1>` mask); xDSL's take only a scalar `i1`.
`loops-vectorize` needs them in lanes where a nest computes a mask (ReLU's `x > 0`) or
chooses by one (ReLU's gradient), so these two ops are MLIR's on vectors, and the C
backend prints them lane by lane like `arith`'s (`m[l] = a[l] > b[l]`):

```
%m = lanes.cmpf ogt, %x, %zeros : vector<8xf32>     // a vector<8xi1>
%g = lanes.select %m, %dy, %zeros : vector<8xi1>, vector<8xf32>
```

They are subclasses of `arith.CmpfOp` and `arith.SelectOp`, so what handles those (the
C printer, `comparison`) handles these.
"""

from __future__ import annotations

from functools import cache
from typing import ClassVar

from xdsl.dialects import arith
from xdsl.dialects.builtin import Float32Type, IntegerAttr, IntegerType, VectorType
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


@cache
def vector_type(element: Attribute, width: int) -> VectorType:
    """`vector<{width}x{element}>`, made once (an attribute's construction verifies it;
    strip-mining DCGAN b8 asked for 4,558)."""
    return VectorType(element, [width])


def mask_type(width: int) -> VectorType:
    """`vector<{width}xi1>`."""
    return vector_type(IntegerType(1), width)


@irdl_op_definition
class CmpfOp(arith.CmpfOp):
    """`arith.cmpf` lane by lane: two `vector<Wxf32>` into a `vector<Wxi1>` mask.

    `%m = lanes.cmpf ogt, %x, %zeros : vector<8xf32>` (the mask: `vector<8xi1>`)
    """

    name = "lanes.cmpf"
    predicate = prop_def(IntegerAttr)
    fastmath = prop_def(arith.FastMathFlagsAttr, default_value=arith.FastMathFlagsAttr("none"))
    lhs = operand_def(VectorType[Float32Type])
    rhs = operand_def(VectorType[Float32Type])
    result = result_def(VectorType[IntegerType])
    traits = traits_def(Pure())

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        predicate: int | str,
        fastmath: arith.FastMathFlagsAttr | None = None,
    ) -> None:
        """As `arith.CmpfOp`'s (whose `parse` and `print` it keeps); the result is the
        mask of as many lanes as the operands."""
        if isinstance(predicate, str):
            predicate = arith.CMPF_COMPARISON_OPERATIONS.index(predicate)
        assert isinstance(lhs.type, VectorType)
        IRDLOperation.__init__(
            self,
            operands=[lhs, rhs],
            result_types=[mask_type(lhs.type.get_shape()[0])],
            properties={
                "predicate": IntegerAttr(predicate, 64),
                "fastmath": fastmath or arith.FastMathFlagsAttr("none"),
            },
        )

    def verify_(self) -> None:
        if self.lhs.type != self.rhs.type:
            raise VerifyException(f"lanes.cmpf: compares {self.lhs.type} with {self.rhs.type}")
        lanes = self.lhs.type.get_shape()  # type: ignore[attr-defined]
        if self.result.type != mask_type(lanes[0]):
            raise VerifyException(
                f"lanes.cmpf: a comparison of {self.lhs.type} gives a {mask_type(lanes[0])}"
            )


@irdl_op_definition
class SelectOp(arith.SelectOp):
    """`arith.select` lane by lane: each lane of `lhs` where the mask's lane is 1, of
    `rhs` where it is 0.

    `%g = lanes.select %m, %dy, %zeros : vector<8xi1>, vector<8xf32>`
    """

    name = "lanes.select"
    _T: ClassVar = VarConstraint("_T", AnyAttr())
    cond = operand_def(VectorType[IntegerType])
    lhs = operand_def(_T)
    rhs = operand_def(_T)
    result = result_def(_T)
    traits = traits_def(Pure())
    assembly_format = None  # arith.select's gives the mask an i1 type: `parse` and `print`

    @classmethod
    def parse(cls, parser: Parser) -> SelectOp:
        """MLIR's vector form: `%m, %a, %b : vector<8xi1>, vector<8xf32>`."""
        names = [parser.parse_unresolved_operand()]
        for _ in range(2):
            parser.parse_punctuation(",")
            names.append(parser.parse_unresolved_operand())
        parser.parse_punctuation(":")
        mask = parser.parse_type()
        parser.parse_punctuation(",")
        ty = parser.parse_type()
        return cls(*parser.resolve_operands(names, [mask, ty, ty], parser.pos))

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list([self.cond.type, self.result.type], printer.print_attribute)

    def verify_(self) -> None:
        ty: Attribute = self.result.type
        if not isinstance(ty, VectorType) or self.cond.type != mask_type(ty.get_shape()[0]):
            raise VerifyException(f"lanes.select: a choice of {ty} needs a mask of as many lanes")


LANES = Dialect("lanes", [CmpfOp, SelectOp], [])
