"""`loops-trim-taps`: a reduction skips the taps that read only padding.

A padded window's read is 0 outside its buffer (`select(inside, x[...], 0)`), and the
terms it multiplies add nothing there. Near a small image's border most taps are such:
a 3 x 3 convolution with padding 1 on ResNet-18's 2 x 2 layer-4 images reads padding at
5 of its 9 taps, on the 4 x 4 images of layer 3 at 31%. As oneDNN's direct convolutions
(their `kh` and `kw` ranges per output row), this pass bounds the loop of each tap by
the output point it serves, and the guard's tests on that tap always hold inside:

```
// ir-opt conv.mlir -p loops-trim-taps
scf.for %d5 = %c0 to %c3 step %c1 iter_args(...) {         // (2 x 2 images)
  %in = arith.cmpi sge, (%d2 + %d5 - 1), %c0 ...           // and (2 - %d2 - %d5) >= 0
  %v = arith.select %in, (memref.load %x[...]), %zero : f32
// becomes
%lo = arith.select (arith.cmpi sgt, (1 - %d2), %c0), (1 - %d2), %c0 : index
%hi = arith.select (arith.cmpi slt, (3 - %d2), %c3), (3 - %d2), %c3 : index
scf.for %d5 = %lo to %hi step %c1 iter_args(...) {
  %v = memref.load %x[...] : memref<8x16x2x2xf32>
```

A loop is bounded by a test `c * i + e >= 0` of its own index `i` (c a nonzero
integer, e affine in the nest's parallel dims: `i >= ceil(-e / c)` or `i <= floor(e /
-c)`) where every sum it carries is unchanged wherever the test fails:
each term added is a product with a read guarded by that test, 0 outside (the same
exactness argument as `kernel-split-phases`). A nest is trimmed only where every test
of every guarded read in it is such a bound (no guard is left, so `loops-pad` has no
copy to make) and where that skips at least `MIN_SKIP` of the reduction's points; the
larger images of a network keep their padded copy, whose register blocks may run along
the image's rows (`loops-unroll-jam` does not jam a dim that bounds a loop). ResNet-18
b8's 2 x 2 images (layer 4: its forwards, input and weight gradients) are trimmed.

A test with c = ±2 is the phase of a stride-2 window's tap (`kernel-split-phases`: the
input gradient of a 3 x 3 max pool of stride 2 runs 2 x 2 taps a phase, `2 * t <= r + 1`
of them live): no padded copy serves it. A nest whose sums add reads alone (that
gradient: window slots, no product, no register block) is trimmed wherever its bounds
skip any tap (ResNet-18 b8's max-pool gradient, one thread: 5.8 -> 3.7 ms a call, best
of two profiled runs of 5 steps each, 2-core Zen 4); a convolution keeps `min-skip` and
unit tests only (`loops-pack` copies a phase-split weight with its guard).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf, vector
from xdsl.dialects.builtin import FloatAttr, ModuleOp, i1
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    Form,
    affine_form,
    erase_dead,
    guard_tests,
    int_constant,
    kernel_functions,
    loop_range,
)
from gradfuse.passes.loops.loops_vectorize import innermost_nests

MIN_SKIP = 0.5
"""The share of a nest's reduction points that trimming must skip: below it the taps
stay whole and `loops-pad` serves the reads. A trimmed nest's register block runs
along the batch, not the image's rows (`loops-unroll-jam`), and reads 8 images apart:
ResNet-18 b8 (one thread, best of 5 twice) took 111.3 / 110.7 ms a step trimming its
2 x 2 images (56% skipped), 114.6 / 112.5 ms trimming its 4 x 4 images too (31%),
114.6 / 115.7 ms trimming none."""


def zero_fill(op: Operation) -> bool:
    """Whether `op` is `select(c, v, 0.0)`: `v`, or 0 where `c` fails (0.0 or, in lanes,
    its broadcast)."""
    if not isinstance(op, arith.SelectOp):
        return False
    fill = op.rhs.owner
    if isinstance(fill, vector.BroadcastOp):
        fill = fill.source.owner
    return (
        isinstance(fill, arith.ConstantOp)
        and isinstance(fill.value, FloatAttr)
        and fill.value.value.data == 0.0
    )


def guarded_zero(op: Operation) -> bool:
    """Whether `op` is `select(g, load, 0.0)` in a reduction loop: a guarded read, 0
    outside its buffer."""
    return (
        zero_fill(op)
        and isinstance(op.operands[1].owner, memref.LoadOp)
        and isinstance(op.parent_op(), scf.ForOp)
    )


def zero_where_failing(v: SSAValue, test: arith.CmpiOp) -> bool:
    """Whether `v` is 0 wherever `test` fails: a guarded read with `test` among its
    guard's tests, or a product, negation or masked value (`select(m, v, 0)`) of one."""
    op = v.owner
    if isinstance(op, arith.SelectOp) and zero_fill(op):  # (a guarded read, or a mask of one)
        return test in (guard_tests(op.cond) or []) or zero_where_failing(op.lhs, test)
    if isinstance(op, arith.MulfOp):
        return zero_where_failing(op.lhs, test) or zero_where_failing(op.rhs, test)
    if isinstance(op, arith.NegfOp):
        return zero_where_failing(op.operand, test)
    return False


def kept(v: SSAValue, acc: SSAValue, test: arith.CmpiOp) -> bool:
    """Whether `v` equals the carried sum `acc` wherever `test` fails: `acc` itself, `acc`
    plus such a 0, or an inner loop's sum that starts at such a value and keeps it."""
    if v is acc:
        return True
    op = v.owner
    if isinstance(op, arith.AddfOp):
        return (kept(op.lhs, acc, test) and zero_where_failing(op.rhs, test)) or (
            kept(op.rhs, acc, test) and zero_where_failing(op.lhs, test)
        )
    if isinstance(op, scf.ForOp):
        k = list(op.results).index(v)  # type: ignore[arg-type]
        y = op.body.block.last_op
        assert isinstance(y, scf.YieldOp)
        return kept(op.iter_args[k], acc, test) and kept(
            y.operands[k], op.body.block.args[1 + k], test
        )
    return False


@dataclass
class Bound:
    """A test `coef * i + rest >= 0` of loop `loop`'s index `i`, coef a nonzero integer
    (±1 for a padded window; ±2 for the phase of a stride-2 window's tap, `2 * t <= r + 1`)."""

    test: arith.CmpiOp
    loop: scf.ForOp
    coef: int
    rest: Form


def as_bound(test: arith.CmpiOp, nest: scf.ParallelOp) -> Bound | None:
    """`test` as a `Bound` of the innermost enclosing `scf.for` of `nest` whose index it
    reads, the rest in `nest`'s dims; else None."""
    form = affine_form(test.lhs)
    if form is None:
        return None
    dims = set(nest.body.block.args)
    loops = [iv for iv in form[0] if iv not in dims]
    if len(loops) != 1:
        return None
    loop = loops[0].owner.parent_op()  # type: ignore[union-attr]
    if not isinstance(loop, scf.ForOp) or not loop.iter_args or int_constant(loop.step) != 1:
        return None
    if int_constant(loop.lb) is None or int_constant(loop.ub) is None:
        return None
    rest = ({iv: c for iv, c in form[0].items() if iv is not loops[0]}, form[1])
    return Bound(test, loop, form[0][loops[0]], rest)


def exact(b: Bound) -> bool:
    """Whether skipping the points where `b.test` fails leaves every sum of its loop."""
    y = b.loop.body.block.last_op
    assert isinstance(y, scf.YieldOp)
    return all(kept(v, acc, b.test) for v, acc in zip(y.operands, b.loop.body.block.args[1:]))


def _range(lo: int, hi: int, bounds: list[Bound], at: dict[SSAValue, int]) -> int:
    """The iterations left of a loop from `lo` to `hi` at the dim values `at`: c * i + e
    >= 0 keeps i >= ceil(-e / c) where c > 0, i <= floor(e / -c) where c < 0."""
    for b in bounds:
        e = b.rest[1] + sum(c * at[iv] for iv, c in b.rest[0].items())
        if b.coef > 0:
            lo = max(lo, -(e // b.coef))
        else:
            hi = min(hi, e // -b.coef + 1)
    return max(0, hi - lo)


def kept_share(loop: scf.ForOp, bounds: list[Bound]) -> float:
    """The mean share of `loop`'s iterations that its bounds keep, over the values of the
    dims they read."""
    lo, hi = int_constant(loop.lb) or 0, int_constant(loop.ub) or 0
    ivs = sorted({iv for b in bounds for iv in b.rest[0]}, key=lambda v: v.index)  # type: ignore[attr-defined]
    ranges = [loop_range(iv) for iv in ivs]
    if hi <= lo or any(r is None for r in ranges):
        return 1.0
    values = [range(r[0], r[1] + 1) for r in ranges if r is not None]
    if prod(len(v) for v in values) > 1 << 16:
        return 1.0
    points = [_range(lo, hi, bounds, dict(zip(ivs, p))) for p in product(*values)]
    return sum(points) / (len(points) * (hi - lo))


def _form_value(form: Form, ops: list[Operation]) -> SSAValue:
    """Index arithmetic computing an affine form of the nest's dims."""
    k = fast.constant(form[1])
    ops.append(k)
    value: SSAValue = k.result
    for iv, c in form[0].items():
        term: SSAValue = iv
        if c != 1:
            scale = fast.constant(c)
            mul = fast.index_op(arith.MuliOp, iv, scale.result)
            ops += [scale, mul]
            term = mul.results[0]
        add = fast.index_op(arith.AddiOp, value, term)
        ops.append(add)
        value = add.results[0]
    return value


def _clamp(value: SSAValue, limit: SSAValue, predicate: str, ops: list[Operation]) -> SSAValue:
    """`value` where `value <predicate> limit`, else `limit` (a max with sgt, a min with slt)."""
    test = fast.cmpi(value, limit, predicate)
    pick = fast.select(test.result, value, limit)
    ops += [test, pick]
    return pick.result


def _divided(value: SSAValue, by: int, op: type[Operation], ops: list[Operation]) -> SSAValue:
    """`value` divided by the constant `by` (rounded by `op`: floor or ceiling), or
    `value` itself where `by` is 1."""
    if by == 1:
        return value
    k = fast.constant(by)
    quotient = fast.index_op(op, value, k.result)
    ops += [k, quotient]
    return quotient.results[0]


def trim(loop: scf.ForOp, bounds: list[Bound]) -> None:
    """Bounds `loop` by `bounds` (computed before it) and drops their tests."""
    ops: list[Operation] = []
    lo, hi = loop.lb, loop.ub
    for b in bounds:
        if b.coef > 0:  # c * i + rest >= 0: i >= ceil(-rest / c)
            neg = _form_value(({iv: -c for iv, c in b.rest[0].items()}, -b.rest[1]), ops)
            lo = _clamp(_divided(neg, b.coef, arith.CeilDivSIOp, ops), lo, "sgt", ops)
        elif b.coef == -1:  # rest - i >= 0: i < rest + 1
            hi = _clamp(_form_value((b.rest[0], b.rest[1] + 1), ops), hi, "slt", ops)
        else:  # rest - c * i >= 0: i < floor(rest / c) + 1
            rest = _divided(_form_value(b.rest, ops), -b.coef, arith.FloorDivSIOp, ops)
            one = fast.constant(1)
            end = fast.index_op(arith.AddiOp, rest, one.result)
            ops += [one, end]
            hi = _clamp(end.results[0], hi, "slt", ops)
    parent = loop.parent_block()
    assert parent is not None
    parent.insert_ops_before(ops, loop)
    loop.operands[0], loop.operands[1] = lo, hi
    for b in bounds:
        assume(b.test)


def assume(test: arith.CmpiOp) -> None:
    """Replaces `test` by true: `andi` with it becomes its other operand, a `select` on
    it its first choice; the ops left unused are erased."""
    v, dead = test.result, [test.result]
    for use in list(v.uses):
        op = use.operation
        if isinstance(op, arith.AndIOp):
            op.result.replace_all_uses_with(op.rhs if op.lhs is v else op.lhs)
            dead.append(op.result)
        elif isinstance(op, arith.SelectOp) and use.index == 0:
            op.result.replace_all_uses_with(op.lhs)
            dead += [op.result, op.rhs]
    if test.result.uses:
        true = fast.constant(1, i1)
        assert test.parent is not None
        test.parent.insert_op_before(true, test)
        test.result.replace_all_uses_with(true.result)
    erase_dead(dead)


def multiplies(nest: scf.ParallelOp) -> bool:
    """Whether a reduction in `nest` adds products (a convolution), not reads alone (a
    pooling's gradient)."""
    return any(
        isinstance(o, arith.MulfOp)
        for loop in nest.walk()
        if isinstance(loop, scf.ForOp) and loop.iter_args
        for o in loop.body.walk()
    )


def trim_nest(nest: scf.ParallelOp, min_skip: float = MIN_SKIP) -> bool:
    """Trims the tap loops of `nest` (see the module docstring); whether it did."""
    guards = [o for o in nest.walk() if guarded_zero(o)]
    tests: dict[arith.CmpiOp, None] = {}
    for sel in guards:
        found = guard_tests(sel.cond)  # type: ignore[attr-defined]
        if found is None:
            return False
        tests.update(dict.fromkeys(found))
    if not tests:
        return False
    per_loop: dict[scf.ForOp, list[Bound]] = {}
    for test in tests:
        b = as_bound(test, nest)
        if b is None or not exact(b):
            return False
        per_loop.setdefault(b.loop, []).append(b)
    kept_all = prod(kept_share(loop, bs) for loop, bs in per_loop.items())
    unit = all(abs(b.coef) == 1 for bs in per_loop.values() for b in bs)
    if not unit and multiplies(nest):
        return False  # (a phase-split convolution: loops-pack copies its guarded weight)
    if kept_all >= 1 or (unit and kept_all > 1 - min_skip):
        return False
    for loop, bs in per_loop.items():
        trim(loop, bs)
    return True


@dataclass(frozen=True)
class LoopsTrimTapsPass(ModulePass):
    """Bounds the tap loops of reductions over padded windows by their output point.

    `ir-opt k.mlir -p 'loops-trim-taps{min-skip=0.5}'`
    """

    name = "loops-trim-taps"

    min_skip: float = MIN_SKIP

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                trim_nest(nest, self.min_skip)
