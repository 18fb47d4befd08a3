"""What the reverse of a loop reads of each forward iteration: stacks of values, or
checkpoints of the carried values every k iterations (used by `backprop`).

The reverse body (`rb`) first recomputes the forward body from placeholders of the
carried values. `stack_choice` says which of those copies to read from stacks instead:
the results of real work that the backward ops read, or, for less memory, only the
carried values (the body is then recomputed). Where even the first would pass the
stack limit, `split_loop` makes the loop two (n/k iterations around k), so that the
outer loop's reverse stacks only its carried values (a checkpoint every k iterations)
and recomputes the inner loop, whose reverse stacks k iterations of work:

    %r = tg.for %i = 0 to 6 step 1 iter(%h = %x) { <body> }
    // split_loop(loop, 3):
    %r = tg.for %j = 0 to 2 step 1 iter(%a = %x) {
      %b = tg.for %i = 0 to 3 step 1 iter(%h = %a) { <body> }
      tg.yield %b
    }
"""

from __future__ import annotations

from collections.abc import Iterable
from math import prod

from xdsl.ir import Block, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.dialects.tg_builder import element_type
from gradfuse.dialects.tg_program import operands_within
from gradfuse.passes.lib.derivatives import is_differentiable

RECOMPUTED = (
    tg.ConstantOp,
    tg.ParamOp,
    tg.ReshapeOp,
    tg.PermuteOp,
    tg.BroadcastOp,
    tg.SliceOp,
    tg.CastOp,
    tg.GatherOp,
    tg.ForOp,
)
"""Forward ops the reverse loop recomputes instead of reading from a stack: views,
reads (a gather reads as much as a stack slot would) and inner loops."""


def stack_choice(
    rb: Block, copies: set[SSAValue], placeholders: set[SSAValue], work: bool
) -> list[SSAValue]:
    """Which `copies` (forward values recomputed in `rb`, the reverse body) to read from
    stacks: the carried values (`placeholders`) that are needed, and with `work` the
    results of real work that the backward ops read."""
    want: set[SSAValue] = set()
    out: list[SSAValue] = []
    for op in reversed(list(rb.ops)):
        if any(r in copies for r in op.results):
            if not any(r in want for r in op.results):
                continue
            v = op.results[0]
            if v in placeholders or (
                work and not isinstance(op, RECOMPUTED) and is_differentiable(v)
            ):
                out.append(v)
                continue
        want.update(operands_within(op))
    return out


def nbytes(values: Iterable[SSAValue]) -> int:
    """The bytes of one slot of a stack of each value."""
    return sum(prod(shape_of(v)) * element_type(v).bitwidth // 8 for v in values)


def checkpoint_interval(n: int, per_step: int, per_checkpoint: int, limit: int) -> int | None:
    """The k (1 < k < n, a divisor of n) that needs least memory for stacks of k steps
    of `per_step` bytes and n/k checkpoints of `per_checkpoint` bytes, both within
    `limit`; None where no k fits."""
    fits = [
        k
        for k in range(2, n)
        if n % k == 0 and k * per_step <= limit and n // k * per_checkpoint <= limit
    ]
    return min(fits, key=lambda k: (n // k * per_checkpoint + k * per_step, k), default=None)


def split_loop(loop: tg.ForOp, k: int) -> tg.ForOp | None:
    """`loop` (n iterations) as a loop of n/k iterations around a loop of k whose body
    is `loop`'s; None where the body reads the induction variable."""
    block = loop.body.block
    if block.args[0].uses:
        return None
    outer = tg.ForOp(0, loop.trip_count // k, 1, list(loop.inits))
    ob = outer.body.block
    inner = tg.ForOp(0, k, 1, list(ob.args[1:]), loop.detach_region(loop.body))
    ob.add_op(inner)
    ob.add_op(tg.YieldOp(list(inner.results)))
    for op in (outer, inner, ob.last_op):
        op.location = loop.location  # type: ignore[union-attr]
    Rewriter.insert_op(outer, InsertPoint.before(loop))
    for old, new in zip(loop.results, outer.results):
        old.replace_all_uses_with(new)
    Rewriter.erase_op(loop)
    return outer
