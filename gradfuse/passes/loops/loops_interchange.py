"""`loops-interchange`: the order of the loops of a reduction nest, for registers and lanes.

`convert-kernel-to-loops` orders a nest's loops as the kernel's domain: a convolution
`y[n, oh, ow, co] = sum(ci, kh, kw) x[n, ci, ..] * w[ci, co, kh, kw]` runs `co`
second of four parallel dims and the window's taps innermost, so the lanes cannot run
along `co` (the dim `y` is stored along), and every tap tests its padding guard for
every input channel. As TVM's `reorder` in its CPU convolution schedules (and MLIR's
`affine-loop-interchange`), this pass:
- makes the dim that the nest's stores write along (the last index of each) the
  innermost parallel dim, where a reduction runs at each point: the lanes then run
  along it (`loops-vectorize`);
- reorders a chain of reduction loops nested one in the other (each body the next loop
  and its `scf.yield`) so that the loop whose index the fewest ops of the innermost body
  use runs innermost (the input channels, rather than a window tap whose index every
  guard and input index use), and moves what no longer varies out of each loop
  (xDSL's loop-invariant code motion): the guards and input indices of a tap are then
  computed once per tap, not once per channel.

The points of an `scf.parallel` are independent, so the first is exact; the second
adds the same terms in another order (float sums round differently).

```
// ir-opt conv.mlir -p loops-interchange
scf.parallel (%d0, %d1, %d2, %d3) = ... {           // n, co, oh, ow
  %s = scf.for %d4 ... {                             // ci
    %t = scf.for %d5 ... { %u = scf.for %d6 ... {    // kh, kw
       guards of %d2, %d3, %d5, %d6; x[.., %d4, ..] * w[%d4, %d1, %d5, %d6] ...
  memref.store %s, %y[%c0, %i, %d1]
// becomes
scf.parallel (%d0, %d2, %d3, %d1) = ... {
  %s = scf.for %d5 ... { %t = scf.for %d6 ... {
    guards of %d2, %d3, %d5, %d6
    %u = scf.for %d4 ... { x[.., %d4, ..] * w[%d4, %d1, %d5, %d6] ...
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from xdsl.context import Context
from xdsl.dialects import memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.transforms.loop_invariant_code_motion import move_loop_invariant_code

from gradfuse.passes.loops.loop_ir import dependents, kernel_functions, own_index, replace_nest
from gradfuse.passes.loops.loops_vectorize import contiguous, innermost_nests, innermost_reduction


def chain(loop: scf.ForOp) -> list[scf.ForOp]:
    """`loop` and the reduction loops perfectly nested in it, outermost first: each
    body only the next loop and an `scf.yield` of its results, which it starts from the
    body's carried values."""
    loops = [loop]
    while True:
        body = list(loops[-1].body.block.ops)
        inner = body[0]
        if not (
            len(body) == 2
            and isinstance(inner, scf.ForOp)
            and list(inner.iter_args) == list(loops[-1].body.block.args[1:])
            and list(body[1].operands) == list(inner.results)
        ):
            return loops
        loops.append(inner)


def uses(loops: list[scf.ForOp]) -> list[int]:
    """For each loop of a chain, how many ops of the innermost body use its index."""
    ops = list(loops[-1].body.walk())
    found = [dependents(loop.body.block.args[0], loop) for loop in loops]
    return [sum(1 for o in ops if any(v in dep for v in o.operands)) for dep in found]


def reorder(loops: list[scf.ForOp]) -> bool:
    """Reorders the ranges of a chain of reduction loops: the more ops of the innermost
    body use an index, the further out it runs (ties keep their order). Whether the
    order changed."""
    if any(loops[0].is_ancestor(v.owner) for lp in loops for v in (lp.lb, lp.ub, lp.step)
           if isinstance(v.owner, Operation)):  # fmt: skip
        return False  # a bound computed in the chain
    count = uses(loops)
    order = sorted(range(len(loops)), key=lambda k: -count[k])
    if order == list(range(len(loops))):
        return False
    ranges = [(lp.lb, lp.ub, lp.step) for lp in loops]
    ivs = [lp.body.block.args[0] for lp in loops]
    users = [[(u.operation, u.index) for u in iv.uses] for iv in ivs]
    names = [iv.name_hint for iv in ivs]
    for pos, k in enumerate(order):
        loops[pos].operands[0], loops[pos].operands[1], loops[pos].operands[2] = ranges[k]
        for user, index in users[k]:
            user.operands[index] = ivs[pos]
        ivs[pos].name_hint = names[k]
    return True


def innermost_first(loops: list[scf.ForOp]) -> None:
    """Moves what each loop of a chain does not need to run in it out, innermost first."""
    for loop in reversed(loops):
        move_loop_invariant_code(loop)


def stored_dim(nest: scf.ParallelOp) -> int | None:
    """The dim of `nest` that every store in it writes along (its last index), if one."""
    stores = [o for o in nest.walk() if isinstance(o, memref.StoreOp)]
    args = list(nest.body.block.args)
    lasts = {o.indices[-1] for o in stores if o.indices}
    if len(lasts) != 1 or len(stores) == 0:
        return None
    last = lasts.pop()
    return args.index(last) if last in args else None


def lane_dim(nest: scf.ParallelOp) -> int | None:
    """The dim to run innermost: where the innermost reduction is no dot product along
    its own index, the stored dim if each read that depends on it takes it as an index
    of its own (contiguous, or contiguous once packed: `loops-pack`), else the innermost
    dim that does so (a convolution's output channels, its output stored by rows); the
    stored dim otherwise."""
    stored = stored_dim(nest)
    loop = innermost_reduction(nest)
    if loop is None or contiguous(loop):
        return stored
    reads = [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]
    args = list(nest.body.block.args)

    def fits(d: SSAValue) -> bool:
        dep = dependents(d, nest)
        touched = [r for r in reads if any(i in dep for i in r.indices)]
        return bool(touched) and all(own_index(list(r.indices), d) is not None for r in touched)

    if stored is not None and fits(args[stored]):
        return stored
    fitting = [k for k, a in enumerate(args) if fits(a)]
    return fitting[-1] if fitting else stored


def permute(nest: scf.ParallelOp, order: list[int]) -> scf.ParallelOp:
    """A new nest in place of `nest`: its dims in `order` (old positions), same body."""
    old = nest.body.block
    new_block = Block(arg_types=[old.args[k].type for k in order])
    for k, arg in zip(order, new_block.args):
        arg.name_hint = old.args[k].name_hint
        old.args[k].replace_all_uses_with(arg)
    for o in list(old.ops):
        o.detach()
        new_block.add_op(o)
    lower, upper, steps = (
        [list(b)[k] for k in order] for b in (nest.lowerBound, nest.upperBound, nest.step)
    )
    return replace_nest(nest, new_block, (lower, upper, steps))


def carries(op: Operation | None) -> TypeGuard[scf.ForOp]:
    """Whether `op` is a loop that carries values (sums)."""
    return isinstance(op, scf.ForOp) and bool(op.iter_args)


def reduction_chains(nest: Operation) -> list[list[scf.ForOp]]:
    """The chains of the outermost reduction loops in `nest` (in no other such loop)."""
    found: list[list[scf.ForOp]] = []
    for op in nest.walk():
        parent = op.parent_op()
        while parent is not None and parent is not nest and not carries(parent):
            parent = parent.parent_op()
        if carries(op) and parent is nest:
            found.append(chain(op))
    return found


def interchange(nest: scf.ParallelOp) -> None:
    """Interchanges the loops of one innermost nest (see the module docstring)."""
    chains = reduction_chains(nest)
    if not chains:
        return
    for loops in chains:
        if len(loops) > 1 and reorder(loops):
            innermost_first(loops)
    dim = lane_dim(nest)
    last = len(nest.body.block.args) - 1
    if dim is not None and dim != last:
        permute(nest, [k for k in range(last + 1) if k != dim] + [dim])


@dataclass(frozen=True)
class LoopsInterchangePass(ModulePass):
    """Orders the loops of reduction nests for lanes and hoisted guards.

    `ir-opt k.mlir -p loops-interchange`
    """

    name = "loops-interchange"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                interchange(nest)
