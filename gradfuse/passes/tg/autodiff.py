"""`tg-autodiff`: expands every `tg.grad` into its reverse-mode gradient program.

`%g = tg.grad %out wrt %x` is d sum(out) / d x: the cotangent of `out` is seeded
with ones (PyTorch's `backward()` with a gradient of ones), pushed backwards
through the ops of the grad's block that lie on a path from a wrt value to `out`
(rules in `gradfuse.passes.lib.derivatives`), and summed with `tg.add` where a value
is used several times. The gradient program is inserted just before the grad,
whose results it replaces:

    %y = tg.mul %x, %x : tensor<4xf32>
    %g = tg.grad %y wrt %x : tensor<4xf32>
    // becomes
    %y = tg.mul %x, %x : tensor<4xf32>
    %one = tg.constant 1.0 : tensor<4xf32>
    %a = tg.mul %one, %x : tensor<4xf32>
    %b = tg.mul %one, %x : tensor<4xf32>
    %g = tg.add %a, %b : tensor<4xf32>

Values defined outside the grad's block (e.g. outside a `tg.for` body) are
constants unless they are wrt values. A wrt value that `out` does not depend on
gets `tg.constant 0.0`; no op is ever emitted to zero an accumulator. Every
gradient op has the provenance of the forward op it differentiates, direction
"backward".
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.lib.backprop import (
    DEFAULT_STACK_LIMIT,
    backprop,
    backward_location,
    dependents,
)
from gradfuse.passes.lib.op_facts import rewrite_walker

INDEPENDENT = (
    "backward(): the output does not depend on any of the values it is differentiated"
    " with respect to"
)


def expand_grad(
    grad: tg.GradOp, rewriter: PatternRewriter, stack_limit: int = DEFAULT_STACK_LIMIT
) -> list[SSAValue]:
    """Emits the gradient program of `grad` before it; returns one gradient per wrt value."""
    block = grad.parent_block()
    assert block is not None
    forward: list[Operation] = []
    for op in block.ops:
        if op is grad:
            break
        forward.append(op)
    depends = dependents(forward, grad.wrt)
    if grad.output not in depends:
        raise GradfuseError(INDEPENDENT, position_of(grad.location))

    seed = Emitter(rewriter, backward_location(grad))
    cotangents = {grad.output: seed.const(1.0, grad.output)}
    backprop(seed, forward, cotangents, depends, stack_limit)
    grads = [cotangents[w] if w in cotangents else seed.const(0.0, w) for w in grad.wrt]
    # rules compute every operand's cotangent; drop those nobody needed
    kept = set(grads)
    for op in reversed(seed.emitted):
        if not any(r.uses or r in kept for r in op.results):
            rewriter.erase(op)
    return grads


@dataclass
class ExpandGrad(RewritePattern):
    """Replaces a `tg.grad` by its gradient program."""

    stack_limit: int = DEFAULT_STACK_LIMIT

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.GradOp, rewriter: PatternRewriter, /):
        grads = expand_grad(op, rewriter, self.stack_limit)
        rewriter.replace(op, [], grads)


def populate_tg_autodiff_patterns(stack_limit: int = DEFAULT_STACK_LIMIT) -> list[RewritePattern]:
    """The patterns of `tg-autodiff`."""
    return [ExpandGrad(stack_limit)]


@dataclass(frozen=True)
class TgAutodiffPass(ModulePass):
    """Expands every `tg.grad` into reverse-mode gradient ops (grads in program order).

    `ir-opt model.tg -p tg-autodiff` replaces `%g = tg.grad %loss wrt %w` by the ops
    that compute d sum(loss) / d w.
    """

    name = "tg-autodiff"

    stack_limit: int = DEFAULT_STACK_LIMIT
    """Bytes of stacks one differentiated loop may fill. Past it the loop of n
    iterations becomes n/k around k, keeps checkpoints of its carried values every k
    iterations and recomputes k at a time in the reverse loop; where no divisor k of n
    fits, it recomputes each iteration (`tg-autodiff{stack_limit=0}` always does)."""

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        patterns = populate_tg_autodiff_patterns(self.stack_limit)
        walker = rewrite_walker(patterns, apply_recursively=False)
        try:
            walker.rewrite_module(op)
        except GradfuseError as err:
            err.__notes__ = []  # xDSL's walker attaches the whole printed module
            raise
