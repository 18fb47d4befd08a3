"""`tg-decompose`: expands composite tg ops (sigmoid, tanh, relu, softmax, reduce_mean, ...) into primitives.

Each pattern replaces one composite by a short primitive chain built at the
composite's location, so provenance survives:

    %y = tg.sigmoid %x : tensor<4xf32>
    // becomes
    %c = tg.constant -1.4426950408889634 : tensor<4xf32>
    %t = tg.mul %x, %c : tensor<4xf32>
    %e = tg.exp2 %t : tensor<4xf32>
    %one = tg.constant 1.0 : tensor<4xf32>
    %d = tg.add %one, %e : tensor<4xf32>
    %y = tg.recip %d : tensor<4xf32>
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ints, shape_of
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.lib import conv
from gradfuse.passes.lib.op_facts import rewrite_walker

LOG2_E = math.log2(math.e)


def emit_sigmoid(e: Emitter, x: SSAValue) -> SSAValue:
    """`recip(1 + exp2(x * -log2(e)))`, the primitive form of `tg.sigmoid`."""
    exp = e.exp2(e.scale(x, -LOG2_E))
    return e.recip(e.add(e.const(1.0, x), exp))


def emit_tanh(e: Emitter, x: SSAValue) -> SSAValue:
    """`2 * sigmoid(2x) - 1`: saturates to +-1 without overflow for large |x|."""
    sig = emit_sigmoid(e, e.scale(x, 2.0))
    return e.sub(e.scale(sig, 2.0), e.const(1.0, x))


def emit_relu(e: Emitter, x: SSAValue) -> SSAValue:
    """`max(x, 0)`."""
    return e.max(x, e.const(0.0, x))


def emit_softmax(e: Emitter, x: SSAValue, dim: int) -> SSAValue:
    """`exp2((x - max) * log2(e)) / sum(...)` along `dim`, the max subtracted for stability."""
    shape = shape_of(x)
    peak = e.expand_reduced(e.reduce_max(x, [dim]), shape, [dim])
    exp = e.exp2(e.scale(e.sub(x, peak), LOG2_E))
    total = e.expand_reduced(e.reduce_sum(exp, [dim]), shape, [dim])
    return e.div(exp, total)


class DecomposeSigmoid(RewritePattern):
    """`tg.sigmoid` -> mul, exp2, add, recip."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.SigmoidOp, rewriter: PatternRewriter, /):
        result = emit_sigmoid(Emitter(rewriter, op.location), op.input)
        rewriter.replace(op, [], [result])


class DecomposeTanh(RewritePattern):
    """`tg.tanh` -> `2 * sigmoid(2x) - 1` in primitives."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.TanhOp, rewriter: PatternRewriter, /):
        result = emit_tanh(Emitter(rewriter, op.location), op.input)
        rewriter.replace(op, [], [result])


class DecomposeRelu(RewritePattern):
    """`tg.relu` -> `tg.max %x, 0`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.ReluOp, rewriter: PatternRewriter, /):
        result = emit_relu(Emitter(rewriter, op.location), op.input)
        rewriter.replace(op, [], [result])


class DecomposeStopGradient(RewritePattern):
    """`tg.stop_gradient` -> its input (after autodiff it is the identity)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.StopGradientOp, rewriter: PatternRewriter, /):
        rewriter.replace(op, [], [op.input])


class DecomposeReduceMean(RewritePattern):
    """`tg.reduce_mean` -> reduce_sum, then mul by 1/n."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.ReduceMeanOp, rewriter: PatternRewriter, /):
        e = Emitter(rewriter, op.location)
        shape, dims = shape_of(op.input), ints(op.dims)
        n = math.prod(shape[d] for d in dims)
        total = e.reduce_sum(op.input, dims)
        rewriter.replace(op, [], [e.mul(total, e.const(1.0 / n if n else float("nan"), total))])


class DecomposeSoftmax(RewritePattern):
    """`tg.softmax` -> reduce_max, sub, exp2, reduce_sum, div with reshapes and broadcasts."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.SoftmaxOp, rewriter: PatternRewriter, /):
        e = Emitter(rewriter, op.location)
        result = emit_softmax(e, op.input, op.dim.value.data)
        rewriter.replace(op, [], [result])


class DecomposeConv2d(RewritePattern):
    """`tg.conv2d` -> a batched dot of guarded views (`gradfuse.passes.lib.conv`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.Conv2dOp, rewriter: PatternRewriter, /):
        result = conv.conv2d(Emitter(rewriter, op.location), op.input, op.weight, op.geometry)
        rewriter.replace(op, [], [result])


class DecomposeConvTranspose2d(RewritePattern):
    """`tg.conv_transpose2d` -> the input gradient of a conv2d: a dot of guarded views."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.ConvTranspose2dOp, rewriter: PatternRewriter, /):
        e = Emitter(rewriter, op.location)
        result = conv.conv2d_input_grad(e, op.input, op.weight, op.geometry)
        rewriter.replace(op, [], [result])


class DecomposeWindows(RewritePattern):
    """`tg.windows` -> one guarded view."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.WindowsOp, rewriter: PatternRewriter, /):
        result = conv.windows(Emitter(rewriter, op.location), op.input, op.geometry)
        rewriter.replace(op, [], [result])


def populate_tg_decompose_patterns() -> list[RewritePattern]:
    """The patterns of `tg-decompose`, one per composite op."""
    return [
        DecomposeSigmoid(), DecomposeTanh(), DecomposeRelu(), DecomposeSoftmax(),
        DecomposeReduceMean(), DecomposeStopGradient(),
        DecomposeConv2d(), DecomposeConvTranspose2d(), DecomposeWindows(),
    ]  # fmt: skip


@dataclass(frozen=True)
class TgDecomposePass(ModulePass):
    """Expands every composite tg op into the primitive set.

    `ir-opt model.tg -p tg-decompose` turns `tg.relu %x` into `tg.max %x, %zero`.
    """

    name = "tg-decompose"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        walker = rewrite_walker(
            populate_tg_decompose_patterns(),
            apply_recursively=False,
        )
        walker.rewrite_module(op)
