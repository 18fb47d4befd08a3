"""Reverse mode over a list of tg ops, loops included (used by `tg-autodiff`).

`backprop(e, ops, cotangents, depends)` pushes the cotangents of some values
backwards through `ops` (program order) with the rules of
`gradfuse.passes.lib.derivatives`, summing with `tg.add` where a value is used
several times. A `tg.for` on the path gets a reverse loop (`reverse_loop`): its body
runs the body's reverse once per iteration, last iteration first, reading what it
needs of each forward iteration from stacks that the forward loop fills, one slot
per iteration:

    %r = tg.for %i = 0 to 3 step 1 iter(%h = %x) : tensor<2xf32> {
      %s = tg.sin %h : tensor<2xf32>
      tg.yield %s
    }
    // the forward loop also carries a stack of %h (3x2) and a counter; then
    %g, %k = tg.for %j = 0 to 3 step 1 iter(%gh = %ct, %c = %two) : ... {
      %h = <slot %c of the stack>                  // tg.gather, tg.reshape
      %d = tg.mul %gh, <cos %h> : tensor<2xf32>
      %c2 = tg.sub %c, %one : tensor<1xf32>
      tg.yield %d, %c2
    }

What the reverse body reads of forward iteration t is stacked when the forward body
computed it with real work (a `tg.dot`, an `exp2`, ...); views, constants, casts,
masks, param reads, gathers and inner loops are recomputed there from the stacked
carried values. When a loop's stacks would pass `stack_limit` bytes, only the carried values
are stacked and the whole body is recomputed (a checkpoint every iteration).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from math import prod

from xdsl.builder import Builder
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of, tensor
from gradfuse.dialects.tg_builder import Emitter, element_type, stack_in_loop
from gradfuse.passes.lib.derivatives import RULES, is_differentiable
from gradfuse.provenance import provenance_of

Cotangents = dict[SSAValue, SSAValue]

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

HOST_EFFECTS = (tg.FeederOp, tg.ReceiverOp, tg.AssignOp, tg.GradOp)
DEFAULT_STACK_LIMIT = 1 << 30
"""Bytes of stacks one loop may fill before its body is recomputed instead."""


def backward_location(op: Operation) -> Attribute:
    """The location of a gradient op: `op`'s provenance with direction "backward"."""
    return _backward(op.location)


@lru_cache(maxsize=4096)
def _backward(location: Attribute) -> Attribute:
    return provenance_of(location).with_direction("backward").to_location()


def operands_within(op: Operation) -> Iterable[SSAValue]:
    """The operands of `op` and of every op nested in its regions."""
    return (v for inner in op.walk() for v in inner.operands)


def dependents(ops: Iterable[Operation], wrt: Iterable[SSAValue]) -> set[SSAValue]:
    """The wrt values and every result of `ops` (in program order) computed from them;
    dependence stops at `tg.stop_gradient` (`detach()`), where no gradient flows."""
    depends = set(wrt)
    for op in ops:
        if not isinstance(op, tg.StopGradientOp) and any(v in depends for v in operands_within(op)):
            depends.update(op.results)
    return depends


def active_ops(
    ops: Sequence[Operation], outputs: Iterable[SSAValue], depends: set[SSAValue]
) -> list[Operation]:
    """The ops on a path from a wrt value to one of `outputs`, last first."""
    needed = set(outputs)
    active: list[Operation] = []
    for op in reversed(ops):
        if not any(r in needed for r in op.results):
            continue
        reads = [v for v in operands_within(op) if v in depends]
        if reads:
            active.append(op)
            needed.update(reads)
    return active


def no_rule_error(op: Operation) -> GradfuseError:
    return GradfuseError(
        f"backward(): cannot differentiate through {op.name} (no derivative rule)",
        position_of(op.location),
    )


def backprop(
    e: Emitter,
    ops: Sequence[Operation],
    cotangents: Cotangents,
    depends: set[SSAValue],
    stack_limit: int = DEFAULT_STACK_LIMIT,
) -> Cotangents:
    """Pushes `cotangents` backwards through `ops`, emitting through `e`; returns the
    cotangents, now also of every value in `depends` on a path to the seeded values."""
    for op in active_ops(ops, list(cotangents), depends):
        here = e.at(backward_location(op))
        if isinstance(op, tg.ForOp):
            cts = [cotangents.get(r) for r in op.results]
            pairs = reverse_loop(here, op, cts, depends, stack_limit)
        else:
            rule = RULES.get(type(op))
            if rule is None or len(op.results) != 1:
                raise no_rule_error(op)
            g = cotangents.get(op.results[0])
            if g is None:
                continue
            pairs = list(zip(op.operands, rule(here, op, g), strict=True))
        for operand, ct in pairs:
            if ct is None or operand not in depends or not is_differentiable(operand):
                continue
            previous = cotangents.get(operand)
            cotangents[operand] = ct if previous is None else here.add(previous, ct)
    return cotangents


# --- loops --------------------------------------------------------------------------


def free_values(loop: tg.ForOp) -> list[SSAValue]:
    """The values the body of `loop` reads from outside it, in first-use order."""
    seen: dict[SSAValue, None] = {}
    for v in (v for op in loop.body.walk() for v in op.operands):
        defined = v.owner if isinstance(v.owner, Operation) else v.owner.parent_op()
        if defined is None or not loop.is_ancestor(defined):
            seen.setdefault(v, None)
    return list(seen)


def check_body(loop: tg.ForOp) -> None:
    """The reverse loop reruns parts of the body: no host calls or state writes there."""
    for op in loop.body.walk():
        if isinstance(op, HOST_EFFECTS):
            raise GradfuseError(
                f"backward(): cannot differentiate through a tg.for whose body has {op.name}"
                " (the reverse loop would run it again); move it out of the loop",
                position_of(op.location),
            )


def active_carried(loop: tg.ForOp, depends: set[SSAValue]) -> list[bool]:
    """Which carried values depend on the differentiated inputs: a fixed point, as a
    carried value depends when its init does or its next value does."""
    block = loop.body.block
    body, yielded = list(block.ops)[:-1], list(block.last_op.operands)  # type: ignore[union-attr]
    active = [v in depends and is_differentiable(v) for v in loop.inits]
    while True:
        live = dependents(body, [*depends, *(a for a, on in zip(block.args[1:], active) if on)])
        now = [on or (y in live and is_differentiable(y)) for on, y in zip(active, yielded)]
        if now == active:
            return active
        active = now


def reverse_loop(
    e: Emitter,
    loop: tg.ForOp,
    cts: Sequence[SSAValue | None],
    depends: set[SSAValue],
    stack_limit: int,
) -> list[tuple[SSAValue, SSAValue]]:
    """Emits the reverse of `loop` through `e` (stacking in `loop`, which is replaced);
    given the cotangents of its results, returns (value, cotangent) pairs for its
    inits and for the outside values its body reads."""
    check_body(loop)
    inits, n = list(loop.inits), loop.trip_count
    if n == 0:
        return [(v, g) for v, g in zip(inits, cts) if g is not None]
    active = active_carried(loop, depends)
    outside = [v for v in free_values(loop) if v in depends and is_differentiable(v)]
    block = loop.body.block
    carried = [a for a, on in zip(block.args[1:], active) if on]
    seeds = [g if g is not None else e.zeros_like(v) for g, v, on in zip(cts, inits, active) if on]
    sums = [e.zeros_like(v) for v in outside]
    rev = tg.ForOp(0, n, 1, [*seeds, *sums, e.const(float(n - 1), tensor([1]))])
    e.emit(rev)
    rb = rev.body.block
    g_args, s_args = rb.args[1 : 1 + len(seeds)], rb.args[1 + len(seeds) : -1]
    counter = rb.args[-1]
    be = Emitter(Builder(InsertPoint.at_end(rb)), e.location)

    # the forward body again, from placeholders of the carried values
    copies: dict[SSAValue, SSAValue] = {a: be.const(0.0, a) for a in block.args[1:]}
    placeholders = set(copies.values())
    clones: list[Operation] = []
    for op in list(block.ops)[:-1]:
        clone = op.clone(value_mapper=copies)
        clone.location = backward_location(op)
        be.builder.insert(clone)
        clones.append(clone)
    seeded: Cotangents = {}
    yielded = [y for y, on in zip(block.last_op.operands, active) if on]  # type: ignore[union-attr]
    for y, g in zip(yielded, g_args):
        y = copies.get(y, y)
        seeded[y] = g if y not in seeded else be.add(seeded[y], g)
    wrt = [copies[a] for a in carried] + outside
    cot = backprop(be, clones, seeded, dependents(clones, wrt), stack_limit)
    nexts = [cot.get(copies[a]) or be.zeros_like(copies[a]) for a in carried]
    nexts += [be.add(s, cot[v]) if v in cot else s for s, v in zip(s_args, outside)]
    rb.add_op(tg.YieldOp([*nexts, be.add(counter, -1.0)]))
    rb.last_op.location = e.location  # type: ignore[union-attr]

    stacked = choose_stacks(rb, set(copies.values()), placeholders, n, stack_limit)
    forward_of = {c: v for v, c in copies.items()}
    before = Emitter(Builder(InsertPoint.before(loop)), loop.location)
    inside = Emitter(Builder(InsertPoint.before(block.last_op)), loop.location)  # type: ignore[arg-type]
    _, stacks = stack_in_loop(loop, [forward_of[c] for c in stacked], before, inside)
    te = Emitter(Builder(InsertPoint.at_start(rb)), e.location)
    for copy, stack in zip(stacked, stacks):
        copy.replace_all_uses_with(te.take(stack, counter))
    erase_dead(rb)
    grads = list(rev.results)
    pairs = list(zip([v for v, on in zip(inits, active) if on], grads))
    return pairs + list(zip(outside, grads[len(seeds) : len(seeds) + len(outside)]))


def choose_stacks(
    rb: Block, copies: set[SSAValue], placeholders: set[SSAValue], n: int, stack_limit: int
) -> list[SSAValue]:
    """Which `copies` (forward values recomputed in `rb`, the reverse body) to read from
    stacks instead: the carried values (`placeholders`) that are needed, and the results
    of real work that the backward ops read; only the former when all would pass
    `stack_limit` bytes (the body is then recomputed from the carried values)."""

    def chosen(stack_work: bool) -> list[SSAValue]:
        want: set[SSAValue] = set()
        out: list[SSAValue] = []
        for op in reversed(list(rb.ops)):
            if any(r in copies for r in op.results):
                if not any(r in want for r in op.results):
                    continue
                v = op.results[0]
                if v in placeholders or (
                    stack_work and not isinstance(op, RECOMPUTED) and is_differentiable(v)
                ):
                    out.append(v)
                    continue
            want.update(operands_within(op))
        return out

    out = chosen(True)
    if n * sum(prod(shape_of(v)) * element_type(v).bitwidth // 8 for v in out) > stack_limit:
        out = chosen(False)
    return out


def erase_dead(block: Block) -> None:
    """Erases the ops of `block` whose results nobody reads, last first."""
    for op in reversed(list(block.ops)):
        if op.results and not any(r.uses for r in op.results):
            Rewriter.erase_op(op)
