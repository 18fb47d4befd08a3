"""Canonicalization patterns of tg ops, run by xDSL's `canonicalize` pass.

Splat constants fold through elementwise ops, views and reductions, and
identities disappear, so autodiff's seed of ones costs nothing:

    %one = tg.constant 1.0 : tensor<2x8xf32>
    %y = tg.mul %x, %one : tensor<2x8xf32>      // -> %x
    %s = tg.reduce_sum %one dims=[0] : tensor<8xf32>   // -> tg.constant 2.0
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from math import prod

from xdsl.dialects.builtin import FloatAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from gradfuse.dialects import tg_compute, tg_data
from gradfuse.dialects.tg_base import FLOAT_TYPES, ints, shape_of

FOLD: dict[type, Callable[..., float]] = {
    tg_compute.AddOp: lambda a, b: a + b,
    tg_compute.SubOp: lambda a, b: a - b,
    tg_compute.MulOp: lambda a, b: a * b,
    tg_compute.DivOp: lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
    tg_compute.MaxOp: max,
    tg_compute.NegOp: lambda a: -a,
    tg_compute.Exp2Op: lambda a: 2.0**a if a < 1024 else math.inf,
    tg_compute.Log2Op: lambda a: math.log2(a) if a > 0 else -math.inf if a == 0 else math.nan,
    tg_compute.SqrtOp: lambda a: math.sqrt(a) if a >= 0 else math.nan,
    tg_compute.RecipOp: lambda a: 1.0 / a if a else math.inf,
    tg_compute.SinOp: math.sin,
}
"""How each elementwise op computes on scalars, for folding splat constants."""

VIEWS = (tg_data.ReshapeOp, tg_data.PermuteOp, tg_data.BroadcastOp, tg_data.SliceOp, tg_data.ViewAccessOp)


def splat(value: SSAValue) -> float | None:
    """The value of a splat `tg.constant` of a float type, else None."""
    owner = value.owner
    if isinstance(owner, tg_data.ConstantOp) and isinstance(owner.value, FloatAttr):
        ty = value.type
        if isinstance(ty, TensorType) and isinstance(ty.element_type, FLOAT_TYPES):
            return owner.value.value.data
    return None


def _constant(rewriter: PatternRewriter, op: Operation, value: float) -> None:
    ty = op.results[0].type
    assert isinstance(ty, TensorType)
    c = tg_data.ConstantOp(value, ty)
    c.location = op.location
    rewriter.replace(op, c)


class FoldSplats(RewritePattern):
    """An elementwise op on splats, a view of a splat, a reduction of a splat: a splat."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        operands = op.operands
        if not operands or not isinstance(operands[0].owner, tg_data.ConstantOp):
            return
        values = [splat(v) for v in operands]
        if not values or any(v is None for v in values):
            return
        if type(op) in FOLD:
            _constant(rewriter, op, FOLD[type(op)](*values))
        elif isinstance(op, tg_data.ViewAccessOp) and op.guard is not None:
            return  # a padded view of a splat is not a splat
        elif isinstance(op, VIEWS) or isinstance(op, tg_compute.ReduceMaxOp):
            _constant(rewriter, op, values[0])  # type: ignore[arg-type]
        elif isinstance(op, tg_compute.ReduceSumOp):
            n = prod(shape_of(op.input)[d] for d in ints(op.dims))
            _constant(rewriter, op, values[0] * n)  # type: ignore[operator]


class DropIdentity(RewritePattern):
    """`x * 1`, `x + 0`, `x - 0`, `x / 1` are `x`."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        unit, commutes = _identity(type(op))
        if unit is None:
            return
        lhs, rhs = op.operands
        if splat(rhs) == unit and rhs.type == op.results[0].type:
            rewriter.replace(op, [], [lhs])
        elif commutes and splat(lhs) == unit:
            rewriter.replace(op, [], [rhs])


@cache
def _identity(cls: type[Operation]) -> tuple[float | None, bool]:
    """The identity element of an op class (1 for mul/div, 0 for add/sub, else None) and
    whether the op commutes (asked once per class: the pattern sees every op)."""
    if not issubclass(cls, tg_compute.MulOp | tg_compute.AddOp | tg_compute.SubOp | tg_compute.DivOp):
        return None, False
    return (1.0 if issubclass(cls, tg_compute.MulOp | tg_compute.DivOp) else 0.0), issubclass(
        cls, tg_compute.MulOp | tg_compute.AddOp
    )


PATTERNS = (FoldSplats(), DropIdentity())
