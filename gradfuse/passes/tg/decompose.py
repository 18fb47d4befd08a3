"""`tg-decompose`: expands composite tg ops (sigmoid, tanh, relu, softmax, reduce_mean, ...) into primitives.

Each row of `DECOMPOSITIONS` replaces one composite by a short primitive chain built at the
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

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


def emit_reduce_mean(e: Emitter, x: SSAValue, dims: tuple[int, ...]) -> SSAValue:
    """`reduce_sum` over `dims`, then times 1/n."""
    n = math.prod(shape_of(x)[d] for d in dims)
    total = e.reduce_sum(x, dims)
    return e.mul(total, e.const(1.0 / n if n else float("nan"), total))


DECOMPOSITIONS: dict[type[Operation], Callable[[Emitter, Any], SSAValue]] = {
    tg.SigmoidOp: lambda e, op: emit_sigmoid(e, op.input),
    tg.TanhOp: lambda e, op: emit_tanh(e, op.input),
    tg.ReluOp: lambda e, op: emit_relu(e, op.input),
    tg.SoftmaxOp: lambda e, op: emit_softmax(e, op.input, op.dim.value.data),
    tg.ReduceMeanOp: lambda e, op: emit_reduce_mean(e, op.input, ints(op.dims)),
    # after autodiff, stop_gradient is the identity
    tg.StopGradientOp: lambda e, op: op.input,
    # convolutions: batched dots of guarded views (`gradfuse.passes.lib.conv`)
    tg.Conv2dOp: lambda e, op: conv.conv2d(e, op.input, op.weight, op.geometry),
    tg.ConvTranspose2dOp: lambda e, op: conv.conv2d_input_grad(e, op.input, op.weight, op.geometry),
    tg.WindowsOp: lambda e, op: conv.windows(e, op.input, op.geometry),
}
"""Composite op class -> the primitives that replace it: `(emitter, op) -> value`."""


class DecomposeComposite(RewritePattern):
    """Replaces a composite op by its `DECOMPOSITIONS` row, emitted at its location."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        rule = DECOMPOSITIONS.get(type(op))
        if rule is not None:
            rewriter.replace(op, [], [rule(Emitter(rewriter, op.location), op)])


def populate_tg_decompose_patterns() -> list[RewritePattern]:
    """The patterns of `tg-decompose`: one, which looks its op up in `DECOMPOSITIONS`."""
    return [DecomposeComposite()]


@dataclass(frozen=True)
class TgDecomposePass(ModulePass):
    """Expands every composite tg op into the primitive set.

    `ir-opt model.tg -p tg-decompose` turns `tg.relu %x` into `tg.max %x, %zero`.
    """

    name = "tg-decompose"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        walker = rewrite_walker(populate_tg_decompose_patterns(), apply_recursively=False)
        walker.rewrite_module(op)
