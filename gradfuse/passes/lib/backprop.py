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
carried values. When a loop's stacks would pass `stack_limit` bytes, the loop is split
into n/k iterations around k and only the carried values are stacked every k
iterations (checkpoints; see `checkpoints`); where no k divides n, every iteration (the
whole body is then recomputed). A weight that the body multiplies (`x @ w`) gets its
gradient as one contraction after the reverse loop (`deferrable`, `summed_after`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from xdsl.builder import Builder
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of, tensor
from gradfuse.dialects.tg_builder import Emitter, stack_in_loop, step_counters
from gradfuse.dialects.tg_program import extend_loop, operands_within
from gradfuse.passes.lib.checkpoints import (
    checkpoint_interval,
    nbytes,
    split_loop,
    stack_choice,
)
from gradfuse.passes.lib.deferred import deferrable, deferred_operand
from gradfuse.passes.lib.derivatives import RULES, is_differentiable
from gradfuse.provenance import provenance_of

Cotangents = dict[SSAValue, SSAValue]

HOST_EFFECTS = (tg.FeederOp, tg.ReceiverOp, tg.AssignOp, tg.GradOp)
DEFAULT_STACK_LIMIT = 1 << 30
"""Bytes of stacks one loop may fill before its body is recomputed instead."""


def backward_location(op: Operation) -> Attribute:
    """The location of a gradient op: `op`'s provenance with direction "backward"."""
    return _backward(op.location)


@lru_cache(maxsize=4096)
def _backward(location: Attribute) -> Attribute:
    return provenance_of(location).with_direction("backward").to_location()


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
    deferred: Mapping[Operation, int] | None = None,
) -> Cotangents:
    """Pushes `cotangents` backwards through `ops`, emitting through `e`; returns the
    cotangents, now also of every value in `depends` on a path to the seeded values.
    The operand `deferred[op]` of an op gets none here (`reverse_loop` sums it after the
    loop)."""
    deferred = deferred or {}
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
            if op in deferred:
                del pairs[deferred[op]]
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
    rev = tg.ForOp(0, n, 1, [*seeds, e.const(float(n - 1), tensor([1]))])
    e.emit(rev)
    rb = rev.body.block
    g_args, counter = rb.args[1:-1], rb.args[-1]
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
    forward_of = {c: v for v, c in copies.items()}
    seeded: Cotangents = {}
    yielded = [y for y, on in zip(block.last_op.operands, active) if on]  # type: ignore[union-attr]
    for y, g in zip(yielded, g_args):
        y = copies.get(y, y)
        seeded[y] = g if y not in seeded else be.add(seeded[y], g)
    wrt = [copies[a] for a in carried] + outside
    deferred = deferrable(clones, set(outside), forward_of, n, stack_limit)
    cot = backprop(be, clones, seeded, dependents(clones, wrt), stack_limit, deferred)
    nexts = [cot.get(copies[a]) or be.zeros_like(copies[a]) for a in carried]
    rb.add_op(tg.YieldOp([*nexts, be.add(counter, -1.0)]))
    rb.last_op.location = e.location  # type: ignore[union-attr]
    summed = [v for v in outside if v in cot]
    if summed:
        rev = extend_loop(rev, [_before(rev, e).zeros_like(v) for v in summed],
                          lambda args: [_inside(rb, e).add(a, cot[v]) for a, v in zip(args, summed)])  # fmt: skip
    later = [(d, cot[d.results[0]]) for d in clones if d in deferred and d.results[0] in cot]
    after = [
        (*deferred_operand(d, deferred[d], outside), forward_of.get(d.lhs) if isinstance(d, tg.DotOp) else None)
        for d, _ in later
    ]  # fmt: skip
    first = len(rev.results)  # of the stacks of `later`'s cotangents
    if later:
        gs = [g for _, g in later]
        rev, _ = stack_in_loop(rev, gs, _before(rev, e), _inside(rb, e), counter)

    erase_dead(rb)
    stacked = stack_choice(rb, set(copies.values()), placeholders, work=True)
    if n * nbytes(stacked) > stack_limit:
        carried_only = stack_choice(rb, set(copies.values()), placeholders, work=False)
        k = checkpoint_interval(n, nbytes(stacked), nbytes(carried_only), stack_limit)
        outer = split_loop(loop, k) if k is not None else None
        if outer is not None:  # checkpoints every k iterations: this reverse goes
            made = [v.owner for v in rev.operands if v not in cts]
            Rewriter.erase_op(rev)
            for op in made:
                if isinstance(op, tg.ConstantOp) and not op.result.uses:
                    Rewriter.erase_op(op)
            return reverse_loop(e, outer, cts, depends, stack_limit)
        stacked = carried_only  # a checkpoint every iteration
    steps = step_counters(loop)
    counted = {c: steps[forward_of[c]] for c in stacked if forward_of[c] in steps}
    stacked = [c for c in stacked if c not in counted]
    lhs = [x for *_, x in after if x is not None]
    forward = list(dict.fromkeys([forward_of[c] for c in stacked] + lhs))
    before = Emitter(Builder(InsertPoint.before(loop)), loop.location)
    _, stacks = stack_in_loop(loop, forward, before, _inside(block, before))
    stack_of = dict(zip(forward, stacks))
    te = Emitter(Builder(InsertPoint.at_start(rb)), e.location)
    for copy in stacked:
        copy.replace_all_uses_with(te.take(stack_of[forward_of[copy]], counter))
    for copy in [c for c, cs in counted.items() if cs == (0.0, 1.0)]:
        copy.replace_all_uses_with(counter)  # t itself: the reverse loop's own counter
        del counted[copy]
    if counted:  # c + s t at iteration t: counters of the reverse loop, t from n - 1 down
        values = list(counted.values())
        starts = [_before(rev, e).const(c + s * (n - 1), tensor([1])) for c, s in values]
        rev = extend_loop(rev, starts, lambda args: [_inside(rb, e).add(a, -s) for a, (_, s) in zip(args, values)])  # fmt: skip
        for copy, arg in zip(counted, rb.args[-len(counted) :]):
            copy.replace_all_uses_with(arg)
    erase_dead(rb)
    grads = list(rev.results)
    pairs = list(zip([v for v, on in zip(inits, active) if on], grads))
    pairs += list(zip(summed, grads[len(seeds) + 1 :]))
    for (rhs, views, x), gs in zip(after, grads[first:]):
        pairs += summed_after(e, rhs, views, stack_of.get(x), gs, depends)  # type: ignore[arg-type]
    return pairs


def _before(loop: tg.ForOp, e: Emitter) -> Emitter:
    return Emitter(Builder(InsertPoint.before(loop)), e.location)


def _inside(block: Block, e: Emitter) -> Emitter:
    """An emitter inserting before `block`'s terminator (its yield)."""
    return Emitter(Builder(InsertPoint.before(block.last_op)), e.location)  # type: ignore[arg-type]


# --- weight gradients summed after the reverse loop ------------------------------------


def summed_after(
    e: Emitter,
    rhs: SSAValue,
    views: list[Operation],
    xs: SSAValue | None,
    gs: SSAValue,
    depends: set[SSAValue],
) -> list[tuple[SSAValue, SSAValue]]:
    """The gradients of the outside values behind a deferred operand `rhs`, from the
    stack `gs` of its op's result cotangent [n, M, N]: for a dot, with the stack `xs`
    of its lhs [n, M, K], one contraction `xs^T @ gs` over all n*M rows; for an add,
    the sum of `gs` over the iterations; then back through `views` (detached copies,
    inserted here)."""
    if xs is None:
        w = e.reduce_sum(gs, 0)
    else:
        n, m, k = shape_of(xs)
        flat = e.reshape(gs, (n * m, shape_of(gs)[-1]))
        w = e.dot(e.transpose_last2(e.reshape(xs, (n * m, k))), flat)
    if not views:
        return [(rhs, w)]
    for view in views:
        e.builder.insert(view)
    made = {r for view in views for r in view.results}
    cot = backprop(e, views, {rhs: w}, dependents(views, depends))
    return [(v, g) for v, g in cot.items() if v in depends and v not in made]


def erase_dead(block: Block) -> None:
    """Erases the ops of `block` whose results nobody reads, last first."""
    for op in reversed(list(block.ops)):
        if op.results and not any(r.uses for r in op.results):
            Rewriter.erase_op(op)
