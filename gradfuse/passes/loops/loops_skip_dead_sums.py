"""`loops-skip-dead-sums`: a reduction whose every sum only adds zeros is not run.

A read guarded by a test of the nest's dims alone (`select(inside, x[...], 0)`, the
test not moving with the reduction's index) is 0 at every step of the loop where the
test fails. The input gradient of a 1 x 1 convolution of stride 2 (ResNet-18's
downsampling layers) reads its output gradient so, at the even rows and columns only
(`(ih) mod 2 == 0`: the phases that `kernel-split-phases` leaves, with no tap to
split): at the other 3 in 4 points every product it sums is a multiple of 0. Where each
sum a loop carries adds a product with such a read (its guard defined outside the
loop), the loop runs only where one of those guards holds, and otherwise its sums keep
their first values (0 + 0 * w is 0; the same exactness argument as `loops-trim-taps`):

```
// ir-opt k.mlir -p loops-skip-dead-sums
%s:2 = scf.for %d6 = %c0 to %c128 step %c1 iter_args(%a = %z, %b = %z) -> (...) {
  %x = arith.select %g0, %r0, %zero : f32        // %g0, %g1 defined before the loop
  ...
// becomes
%any = arith.ori %g0, %g1 : i1
%s:2 = scf.if %any -> (...) {
  %t:2 = scf.for %d6 = ... { ... }
  scf.yield %t#0, %t#1
} else {
  scf.yield %z, %z
}
```

It runs after `loops-unroll-jam`: a register block is skipped where all of its rows
are dead (the odd phase rows of the downsampling gradient's blocks). ResNet-18 b8,
one thread: its three such kernels 0.77, 0.53 and 0.53 ms a call before.

Where the loop's sums all have the one test, it holds in the loop: its guarded reads
are their values (`known`). The input gradient of a 3 x 3 convolution of stride 2 split
into phases (`kernel-split-phases`: 2 x 2 taps a phase, 7 of the 16 past the window)
reads its packed weight so (`loops-pack` leaves the tap's test on the read): the loop
over the output channels runs at the 9 live taps only, and reads with no test.
ResNet-18 b8's three such kernels, one thread (`gradfuse.profiler`, runs taken
alternately, 3 each): 7.6-8.2 -> 5.2-5.7 ms a step; the same bits (each skipped term
was `0 * x`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, scf, vector
from xdsl.dialects.builtin import ModuleOp, i1
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.loops.loop_ir import inside, kernel_functions
from gradfuse.passes.loops.loops_trim_taps import zero_fill


def zero_unless(v: SSAValue) -> SSAValue | None:
    """The test where `v` may be nonzero: of a guarded read `select(c, x, 0.0)`, or of a
    broadcast, product or negation of one; None where there is none."""
    op = v.owner
    if isinstance(op, arith.SelectOp) and zero_fill(op) and op.cond.type == i1:
        return op.cond  # (a test of the point, not a mask of lanes)
    if isinstance(op, vector.BroadcastOp):
        return zero_unless(op.source)
    if isinstance(op, arith.MulfOp):
        return zero_unless(op.lhs) or zero_unless(op.rhs)
    if isinstance(op, arith.NegfOp):
        return zero_unless(op.operand)
    return None


def hoisted(v: SSAValue, loop: scf.ForOp, before: list[Operation], vm: dict) -> SSAValue | None:
    """`v`, or where it is computed in `loop` without depending on the loop's index,
    sums or memory (a guard's index arithmetic, which gcc hoists too), its copy among
    `before` (to go before the loop); None where it depends on them."""
    if not inside(v, loop):
        return v
    if v in vm:
        return vm[v]
    op = v.owner
    if not isinstance(op, Operation) or op.regions or type(op).__module__ != arith.__name__:
        return None
    operands = [hoisted(o, loop, before, vm) for o in op.operands]
    if any(o is None for o in operands):
        return None
    new = op.clone_without_regions(dict(zip(op.operands, operands)))  # type: ignore[arg-type]
    before.append(new)
    vm.update(zip(op.results, new.results))
    return vm[v]


def dead_guards(
    loop: scf.ForOp, before: list[Operation], tests: dict[SSAValue, SSAValue] | None = None
) -> list[SSAValue] | None:
    """The tests, computed before `loop` (their copies added to `before`), one of which
    must hold for any of its sums to add a nonzero term: each carried value is `acc +
    t`, `t` zero unless a test holds; None where a sum has no such test. `tests` gets
    each test as the loop reads it, and its value before the loop."""
    body = loop.body.block
    y = body.last_op
    if not isinstance(y, scf.YieldOp) or not y.operands:
        return None
    guards: list[SSAValue] = []
    vm: dict[SSAValue, SSAValue] = {}
    for acc, v in zip(body.args[1:], y.operands):
        add = v.owner
        if not isinstance(add, arith.AddfOp) or acc not in (add.lhs, add.rhs):
            return None
        test = zero_unless(add.rhs if add.lhs is acc else add.lhs)
        guard = None if test is None else hoisted(test, loop, before, vm)
        if guard is None:
            return None
        if tests is not None:
            tests[test] = guard  # type: ignore[index]
        if guard not in guards:
            guards.append(guard)
    return guards


def known(loop: scf.ForOp, tests: dict[SSAValue, SSAValue]) -> None:
    """In `loop`, run where its one test holds: each read guarded by that test (`select(
    test, x, 0)`) is `x` (a packed weight's taps past a strided window, `loops-pack`)."""
    for op in list(loop.walk()):
        if zero_fill(op) and op.cond in tests:  # type: ignore[attr-defined]
            op.results[0].replace_all_uses_with(op.lhs)  # type: ignore[attr-defined]
            op.detach()
            op.erase()


def skip(loop: scf.ForOp, guards: list[SSAValue], before: list[Operation]) -> None:
    """Puts `loop` in an `scf.if` on the disjunction of `guards` (computed by `before`),
    whose else yields the loop's initial values."""
    new = list(before)
    cond = guards[0]
    for g in guards[1:]:
        new.append(arith.OrIOp(cond, g))
        cond = new[-1].results[0]
    branch = scf.IfOp(cond, [r.type for r in loop.results], Region(Block()), Region(Block()))
    new.append(branch)
    parent = loop.parent
    assert parent is not None
    parent.insert_ops_before(new, loop)
    for old, result in zip(loop.results, branch.results):
        old.replace_all_uses_with(result)
    loop.detach()
    branch.true_region.block.add_ops([loop, scf.YieldOp(*loop.results)])
    branch.false_region.block.add_op(scf.YieldOp(*loop.iter_args))


@dataclass(frozen=True)
class LoopsSkipDeadSumsPass(ModulePass):
    """Runs each reduction loop whose sums add only guarded terms where a guard holds.

    `ir-opt k.mlir -p loops-skip-dead-sums`
    """

    name = "loops-skip-dead-sums"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for loop in [o for o in fn.walk() if isinstance(o, scf.ForOp) and o.iter_args]:
                before: list[Operation] = []
                tests: dict[SSAValue, SSAValue] = {}
                guards = dead_guards(loop, before, tests)
                if guards:
                    skip(loop, guards, before)
                    if len(guards) == 1:
                        known(loop, tests)
                else:
                    for op in reversed(before):
                        op.erase()
