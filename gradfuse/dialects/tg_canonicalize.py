"""Canonicalization patterns of tg ops, run by xDSL's `canonicalize` pass.

Splat constants fold through elementwise ops, views and reductions, and
identities disappear, so autodiff's seed of ones costs nothing:

    %one = tg.constant 1.0 : tensor<2x8xf32>
    %y = tg.mul %x, %one : tensor<2x8xf32>      // -> %x
    %s = tg.reduce_sum %one dims=[0] : tensor<8xf32>   // -> tg.constant 2.0
"""

from __future__ import annotations

from math import prod

from xdsl.dialects.builtin import FloatAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import Commutative

from gradfuse.dialects import tg_compute, tg_data
from gradfuse.dialects.tg_base import FLOAT_TYPES, ints, shape_of
from gradfuse.dialects.tg_elementwise import SEMANTICS

VIEWS = (
    tg_data.ReshapeOp,
    tg_data.PermuteOp,
    tg_data.BroadcastOp,
    tg_data.SliceOp,
    tg_data.ViewAccessOp,
)


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
        row = SEMANTICS.get(type(op))
        if row is not None and row.fold is not None:
            _constant(rewriter, op, row.fold(*values))
        elif isinstance(op, tg_data.ViewAccessOp) and op.guard is not None:
            return  # a padded view of a splat is not a splat
        elif isinstance(op, VIEWS) or isinstance(op, tg_compute.ReduceMaxOp):
            _constant(rewriter, op, values[0])  # type: ignore[arg-type]
        elif isinstance(op, tg_compute.ReduceSumOp):
            n = prod(shape_of(op.input)[d] for d in ints(op.dims))
            _constant(rewriter, op, values[0] * n)  # type: ignore[operator]


class DropIdentity(RewritePattern):
    """`x * 1`, `x + 0`, `x - 0`, `x / 1` are `x`, and so are `1 * x`, `0 + x`: each op's
    `identity` in `SEMANTICS`, on the left too where the op commutes."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        row = SEMANTICS.get(type(op))
        if row is None or row.identity is None:
            return
        lhs, rhs = op.operands
        if splat(rhs) == row.identity and rhs.type == op.results[0].type:
            rewriter.replace(op, [], [lhs])
        elif op.has_trait(Commutative) and splat(lhs) == row.identity:
            rewriter.replace(op, [], [rhs])


PATTERNS = (FoldSplats(), DropIdentity())
