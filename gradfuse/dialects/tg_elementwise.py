"""tg elementwise arithmetic: the ops and `SEMANTICS`, the one table of what each means.

An op is its class (operands, result type, verifier) plus one `Semantics` row. Every
stage reads the row and has no per-op code of its own: the reference interpreter and
both NumPy runners call `numpy`, canonicalization folds splats with `fold` and drops
`identity`, the kernel-body builder emits `kernel` (after a constant `first` operand),
and the C and CUDA renderers call the function `c`. Derivative rules stay in
`gradfuse.passes.lib.derivatives.RULES`, keyed by the same classes. For `tg.exp2`:

    %y = tg.exp2 %x : tensor<4xf32>       // reference: np.exp2(x); fold: 2.0 ** a
    %0 = math.exp2 %a : f32               // in a kernel body; C and CUDA: exp2f(a)

Adding an elementwise op is its class here, its row in `SEMANTICS`, its derivative
rule and its `Tensor` method.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import TensorType, i1
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Commutative, Pure

from gradfuse.dialects.tg_base import TgCanonicalize, TgOp, shape_of, tensor


class BinaryOp(TgOp):
    """Elementwise op on two operands of one tensor type."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgCanonicalize())
    RESULT_IS_MASK: ClassVar[bool] = False
    FLOAT_OPERANDS: ClassVar[bool] = True

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        ty = lhs.type
        if self.RESULT_IS_MASK and isinstance(ty, TensorType):
            ty = tensor(ty.get_shape(), i1)
        super().__init__(operands=[lhs, rhs], result_types=[ty])

    def verify_(self) -> None:
        if self.lhs.type != self.rhs.type:
            raise self.fail(
                f"operand types differ: {self.lhs.type} and {self.rhs.type}"
                " (broadcast explicitly with tg.broadcast)"
            )
        want = self.lhs.type
        if self.RESULT_IS_MASK:
            want = tensor(shape_of(self.lhs), i1)
        if self.result.type != want:
            raise self.fail(f"result type should be {want}, got {self.result.type}")


class UnaryOp(TgOp):
    """Elementwise op on one operand; the result has the operand's type."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), TgCanonicalize())
    FLOAT_OPERANDS: ClassVar[bool] = True

    def __init__(self, input: SSAValue):
        super().__init__(operands=[input], result_types=[input.type])

    def verify_(self) -> None:
        if self.result.type != self.input.type:
            raise self.fail(
                f"result type {self.result.type} differs from operand type {self.input.type}"
            )


@irdl_op_definition
class AddOp(BinaryOp):
    """Elementwise sum. `%z = tg.add %x, %y : tensor<4xf32>`"""

    name = "tg.add"
    traits = traits_def(Pure(), Commutative(), TgCanonicalize())


@irdl_op_definition
class SubOp(BinaryOp):
    """Elementwise difference. `%z = tg.sub %x, %y : tensor<4xf32>`"""

    name = "tg.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """Elementwise product. `%z = tg.mul %x, %y : tensor<4xf32>`"""

    name = "tg.mul"
    traits = traits_def(Pure(), Commutative(), TgCanonicalize())


@irdl_op_definition
class DivOp(BinaryOp):
    """Elementwise quotient. `%z = tg.div %x, %y : tensor<4xf32>`"""

    name = "tg.div"


@irdl_op_definition
class MaxOp(BinaryOp):
    """Elementwise maximum. `%z = tg.max %x, %y : tensor<4xf32>`"""

    name = "tg.max"
    traits = traits_def(Pure(), Commutative(), TgCanonicalize())


@irdl_op_definition
class NegOp(UnaryOp):
    """`-x`. `%y = tg.neg %x : tensor<4xf32>`"""

    name = "tg.neg"


@irdl_op_definition
class Exp2Op(UnaryOp):
    """`2**x`. `%y = tg.exp2 %x : tensor<4xf32>`"""

    name = "tg.exp2"


@irdl_op_definition
class Expm1Op(UnaryOp):
    """`e**x - 1`, exact near 0 where `exp2(x log2 e) - 1` cancels.
    `%y = tg.expm1 %x : tensor<4xf32>`"""

    name = "tg.expm1"


@irdl_op_definition
class Log2Op(UnaryOp):
    """`log2(x)`. `%y = tg.log2 %x : tensor<4xf32>`"""

    name = "tg.log2"


@irdl_op_definition
class Log1pOp(UnaryOp):
    """`ln(1 + x)`, exact near 0 where `log2(1 + x) ln 2` loses `x`.
    `%y = tg.log1p %x : tensor<4xf32>`"""

    name = "tg.log1p"


@irdl_op_definition
class SqrtOp(UnaryOp):
    """`sqrt(x)`. `%y = tg.sqrt %x : tensor<4xf32>`"""

    name = "tg.sqrt"


@irdl_op_definition
class RecipOp(UnaryOp):
    """`1/x`. `%y = tg.recip %x : tensor<4xf32>`"""

    name = "tg.recip"


@irdl_op_definition
class SinOp(UnaryOp):
    """`sin(x)`. `%y = tg.sin %x : tensor<4xf32>`"""

    name = "tg.sin"


@irdl_op_definition
class ErfOp(UnaryOp):
    """The error function. `%y = tg.erf %x : tensor<4xf32>`"""

    name = "tg.erf"


@irdl_op_definition
class Atan2Op(BinaryOp):
    """The angle of the point (x, y) from the x axis, in [-pi, pi], as C's `atan2(y, x)`:
    its first operand is y. `atan(t)` is `atan2(t, 1)`, `asin(t)` `atan2(t, sqrt(1 - t^2))`.
    `%z = tg.atan2 %y, %x : tensor<4xf32>`"""

    name = "tg.atan2"


# --- what each op means ------------------------------------------------------------


@dataclass(frozen=True)
class Semantics:
    """What one elementwise op computes, in the form each stage needs."""

    numpy: Callable[..., Any]
    """On NumPy arrays or scalars of the operands' dtype (the interpreters)."""
    kernel: type[Operation]
    """The arith/math op of a kernel body."""
    fold: Callable[..., float] | None = None
    """On Python floats, for folding splat constants (None: not folded)."""
    c: str | None = None
    """The C and CUDA function of a math op, f32 spelling (`exp2f`; f64 drops the `f`);
    arith ops are operators, spelled by the renderer."""
    first: float | None = None
    """A constant first operand of `kernel`: `tg.recip %x` is `arith.divf 1.0, %x`."""
    identity: float | None = None
    """`x op identity == x` (`x * 1`, `x - 0`); also `identity op x` if the op commutes."""


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: Any) -> Any:
    """The error function, elementwise, computed in float64 and returned in x's dtype."""
    dtype = np.result_type(x)
    out = _ERF(np.asarray(x, dtype=np.float64)).astype(dtype)
    return out[()] if np.ndim(x) == 0 else out


def _finite(f: Callable[[float], float], overflow: float = math.inf) -> Callable[[float], float]:
    """`f` with IEEE's answers where Python's math raises: NaN outside the domain,
    `overflow` where the result is too large."""

    def fold(a: float) -> float:
        try:
            return f(a)
        except OverflowError:
            return overflow
        except ValueError:
            return math.nan

    return fold


def _log(f: Callable[[float], float], pole: float) -> Callable[[float], float]:
    """A logarithm's fold: -inf at its pole, NaN below it."""
    return lambda a: f(a) if a > pole else -math.inf if a == pole else math.nan


SEMANTICS: dict[type[Operation], Semantics] = {
    AddOp: Semantics(np.add, arith.AddfOp, lambda a, b: a + b, identity=0.0),
    SubOp: Semantics(np.subtract, arith.SubfOp, lambda a, b: a - b, identity=0.0),
    MulOp: Semantics(np.multiply, arith.MulfOp, lambda a, b: a * b, identity=1.0),
    DivOp: Semantics(
        np.divide, arith.DivfOp,
        lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
        identity=1.0,
    ),
    MaxOp: Semantics(np.maximum, arith.MaximumfOp, max),
    NegOp: Semantics(np.negative, arith.NegfOp, lambda a: -a),
    Exp2Op: Semantics(np.exp2, xmath.Exp2Op, _finite(lambda a: 2.0**a), "exp2f"),
    Expm1Op: Semantics(np.expm1, xmath.ExpM1Op, _finite(math.expm1), "expm1f"),
    Log2Op: Semantics(np.log2, xmath.Log2Op, _log(math.log2, 0.0), "log2f"),
    Log1pOp: Semantics(np.log1p, xmath.Log1pOp, _log(math.log1p, -1.0), "log1pf"),
    SqrtOp: Semantics(np.sqrt, xmath.SqrtOp, lambda a: math.sqrt(a) if a >= 0 else math.nan, "sqrtf"),
    RecipOp: Semantics(np.reciprocal, arith.DivfOp, lambda a: 1.0 / a if a else math.inf, first=1.0),
    SinOp: Semantics(np.sin, xmath.SinOp, _finite(math.sin), "sinf"),
    ErfOp: Semantics(erf, xmath.ErfOp, None, "erff"),
    Atan2Op: Semantics(np.arctan2, xmath.Atan2Op, math.atan2, "atan2f"),
}  # fmt: skip
"""Every elementwise arithmetic op of tg, by class (see the module docstring)."""

KERNEL_NUMPY: dict[type[Operation], Callable[..., Any]] = {
    row.kernel: row.numpy for row in SEMANTICS.values() if row.first is None
}
"""The NumPy implementation of each arith/math op that a kernel body gets from tg."""

C_FUNCTIONS: dict[type[Operation], str] = {
    row.kernel: row.c for row in SEMANTICS.values() if row.c is not None
}
"""The C and CUDA function of each math op that a kernel body gets from tg."""
