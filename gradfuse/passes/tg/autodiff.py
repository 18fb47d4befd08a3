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

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.lib.derivatives import RULES, is_differentiable
from gradfuse.passes.lib.op_facts import rewrite_walker
from gradfuse.provenance import provenance_of

INDEPENDENT = (
    "backward(): the output does not depend on any of the values it is differentiated"
    " with respect to"
)


def backward_location(op: Operation) -> Attribute:
    """The location of a gradient op: `op`'s provenance with direction "backward"."""
    return _backward(op.location)


@lru_cache(maxsize=4096)
def _backward(location: Attribute) -> Attribute:
    return provenance_of(location).with_direction("backward").to_location()


def uses_any(op: Operation, values: set[SSAValue]) -> bool:
    """Whether `op`, or an op nested in its regions, reads one of `values`."""
    return any(v in values for inner in op.walk() for v in inner.operands)


def dependents(ops: Iterable[Operation], wrt: Iterable[SSAValue]) -> set[SSAValue]:
    """The wrt values and every result of `ops` (in program order) computed from them;
    dependence stops at `tg.stop_gradient` (`detach()`), where no gradient flows."""
    depends = set(wrt)
    for op in ops:
        if uses_any(op, depends) and not isinstance(op, tg.StopGradientOp):
            depends.update(op.results)
    return depends


def active_ops(ops: list[Operation], output: SSAValue, depends: set[SSAValue]) -> list[Operation]:
    """The ops on a path from a wrt value to `output`, last first."""
    needed = {output}
    active: list[Operation] = []
    for op in reversed(ops):
        if any(r in needed for r in op.results) and uses_any(op, depends):
            active.append(op)
            needed.update(v for v in op.operands if v in depends)
    return active


def no_rule_error(op: Operation) -> GradfuseError:
    return GradfuseError(
        f"backward(): cannot differentiate through {op.name} (no derivative rule)",
        position_of(op.location),
    )


def expand_grad(grad: tg.GradOp, rewriter: PatternRewriter) -> list[SSAValue]:
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
    cotangents: dict[SSAValue, SSAValue] = {grad.output: seed.const(1.0, grad.output)}
    for op in active_ops(forward, grad.output, depends):
        rule = RULES.get(type(op))
        if rule is None or len(op.results) != 1:
            raise no_rule_error(op)
        g = cotangents.get(op.results[0])
        if g is None:
            continue
        e = seed.at(backward_location(op))
        for operand, ct in zip(op.operands, rule(e, op, g), strict=True):
            if ct is None or operand not in depends or not is_differentiable(operand):
                continue
            previous = cotangents.get(operand)
            cotangents[operand] = ct if previous is None else e.add(previous, ct)

    grads = [cotangents[w] if w in cotangents else seed.const(0.0, w) for w in grad.wrt]
    # rules compute every operand's cotangent; drop those nobody needed
    kept = set(grads)
    for op in reversed(seed.emitted):
        if not any(r.uses or r in kept for r in op.results):
            rewriter.erase(op)
    return grads


class ExpandGrad(RewritePattern):
    """Replaces a `tg.grad` by its gradient program."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.GradOp, rewriter: PatternRewriter, /):
        grads = expand_grad(op, rewriter)
        rewriter.replace(op, [], grads)


def populate_tg_autodiff_patterns() -> list[RewritePattern]:
    """The patterns of `tg-autodiff`."""
    return [ExpandGrad()]


@dataclass(frozen=True)
class TgAutodiffPass(ModulePass):
    """Expands every `tg.grad` into reverse-mode gradient ops (grads in program order).

    `ir-opt model.tg -p tg-autodiff` replaces `%g = tg.grad %loss wrt %w` by the ops
    that compute d sum(loss) / d w.
    """

    name = "tg-autodiff"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        walker = rewrite_walker(populate_tg_autodiff_patterns(), apply_recursively=False)
        try:
            walker.rewrite_module(op)
        except GradfuseError as err:
            err.__notes__ = []  # xDSL's walker attaches the whole printed module
            raise
