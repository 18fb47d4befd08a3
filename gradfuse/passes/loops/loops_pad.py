"""`loops-pad`: a guarded read in a reduction becomes a read of a padded copy.

A convolution with padding reads its input only where the window lies inside it: the
lowering guards each such read, `select(inside, x[select(inside, i)], 0)`, and the
test runs at every step of the innermost reduction (DCGAN b8's transposed 4 x 4
convolution of [8, 128, 16, 16], one thread: 16.9 ms with its guards, 6.9 ms reading a
padded copy, 0.1 ms to make).
As TVM's `pad` stage and XLA's padded convolutions, this pass copies such an operand,
once per call, into a scratch buffer with a border of the guard's value around it, and
the reduction reads the copy at the same point shifted by the border, without a test:

```
// ir-opt conv.mlir -p loops-pad
%in = arith.andi (arith.cmpi sge, %h, %c0), (arith.cmpi sge, (4 - %h), %c0) : i1
%v = memref.load %x[%b, %ci, (arith.select %in, %h, %c0), ...] : memref<1x2x5x5xf32>
%r = arith.select %in, %v, %zero : f32
// becomes
%padded = memref.alloc() : memref<1x2x7x7xf32>
scf.parallel (%p0, %p1, %p2, %p3) ... {      // the copy: x inside, 0.0 on the border
  ...
}
%r = memref.load %padded[%b, %ci, (arith.addi %h, %c1), ...] : memref<1x2x7x7xf32>
```

A read is padded where it lies in a nest's innermost reduction, its value is
`select(g, load, constant)`, each of its indices is `select(g, e, _)` or `e` (affine in
loop indices with constant bounds), and the guard `g` is a conjunction of bounds on
those indices, `e >= 0` and `size - 1 - e >= 0` (what the lowering of a padded window
writes; a parity test or a mask is left as it is). The border on each side of a dim is
how far `e` reaches past it over the loops. A buffer that the nest reads this way at
several places gets one copy, with the widest border; where every border is empty the
guard was redundant and goes without a copy. The copy is made only where the nest
reads at least `min-reuse` times as many elements as the copy writes.

The copy's dims are laid out for the reduction (`innermost_order`): where every read
steps one dim by one per step of the innermost reduction (a convolution's input
channels: `x[n, ci, h + kh, w + kw]` in a loop over `ci`), that dim goes last, so that
the steps read the copy in a row, not H x W floats apart (a new cache line each step:
the 4 image columns of a register block read 4 floats of a line a step, their weights
a line too); where a read depends on the nest's innermost dim (which runs in lanes:
the image's columns of a 1-channel output) or the dim is the first (the images that a
weight gradient sums over), the buffer's order stays. The same values in the same
order: the results are bitwise those of the unpadded order. DCGAN b8, one thread,
2-core Zen 3: its kernels 290 -> 261 ms a step (`gradfuse.profiler`, best of 2 runs:
the phase-split transposed convolutions 10.1-10.5 -> 7.1-7.4 ms), its step 294 -> 271
ms; ResNet-18 b8's step 134 -> 130 ms (best of 5, runs taken alternately).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    Form,
    affine_form,
    erase_dead,
    guard_tests,
    guarded_select,
    int_constant,
    kernel_functions,
    loop_range,
    scratch,
    trips,
)
from gradfuse.passes.loops.loops_vectorize import innermost_nests, innermost_reduction
from gradfuse.passes.loops.pack_copy import box_nest

MIN_REUSE = 8
"""Reads of a padded buffer by its nest per element of the copy, below which a guarded
read keeps its guard: the copy reads and writes each element once."""


def form_range(form: Form) -> tuple[int, int]:
    """The least and greatest value of an affine form over its loops."""
    lo = hi = form[1]
    for iv, c in form[0].items():
        a, b = loop_range(iv) or (0, 0)
        lo, hi = lo + min(c * a, c * b), hi + max(c * a, c * b)
    return lo, hi


def conjuncts(g: SSAValue) -> list[Form] | None:
    """The affine forms `t` of a guard that is a conjunction of `t >= 0`, else None."""
    tests = guard_tests(g)
    if tests is None:
        return None
    forms = [f for t in tests if (f := affine_form(t.lhs)) is not None]
    return forms if len(forms) == len(tests) else None


@dataclass
class Read:
    """A guarded read that a padded copy can serve (`guarded_read`)."""

    load: memref.LoadOp
    value: arith.SelectOp  # select(guard, load, fill)
    exprs: list[SSAValue]  # the load's indices without their guards
    below: list[int]  # how far each index reaches below 0
    above: list[int]  # ... and past the buffer's last point


def guarded_read(load: memref.LoadOp) -> Read | None:
    """`load` as a `Read` where it has the form the module docstring describes."""
    if (sel := guarded_select(load)) is None:
        return None
    guard, shape = sel.cond, load.memref.type.get_shape()  # type: ignore[attr-defined]
    exprs = [
        i.owner.lhs if isinstance(i.owner, arith.SelectOp) and i.owner.cond is guard else i
        for i in load.indices
    ]
    maybe = [affine_form(e) for e in exprs]
    forms = [f for f in maybe if f is not None]
    bounds = conjuncts(guard)
    if bounds is None or len(forms) != len(exprs):
        return None
    low, high = [False] * len(exprs), [False] * len(exprs)
    for t in bounds:
        for k, f in enumerate(forms):
            if t == f:
                low[k] = True
                break
            if t == ({iv: -c for iv, c in f[0].items()}, shape[k] - 1 - f[1]):
                high[k] = True
                break
        else:
            return None  # a test that is no bound of an index
    reach = [form_range(f) for f in forms]
    below = [max(0, -lo) for lo, _ in reach]
    above = [max(0, hi - (n - 1)) for (_, hi), n in zip(reach, shape)]
    if any((b and not lo) or (a and not hi) for b, a, lo, hi in zip(below, above, low, high)):
        return None  # a read past a bound no test guards
    return Read(load, sel, exprs, below, above)


def reads(load: memref.LoadOp) -> int:
    """How often `load` runs: the iterations of every loop around it."""
    out, op = 1, load.parent_op()
    while op is not None and not isinstance(op, func.FuncOp):
        if isinstance(op, scf.ForOp):
            out *= max(trips(op.lb, op.ub, op.step), 1)
        elif isinstance(op, scf.ParallelOp):
            out *= prod(max(trips(*b), 1) for b in zip(op.lowerBound, op.upperBound, op.step))
        op = op.parent_op()
    return out


def pad_nest(
    source: SSAValue,
    target: SSAValue,
    below: list[int],
    fill: SSAValue,
    order: list[int],
) -> tuple[scf.ParallelOp, list[Operation]]:
    """`target[p] = source[p - below]` where that lies in `source`, else `fill`, over
    `target`'s shape, whose dims are `source`'s in `order`; and the constants the nest
    needs. A dim that `order` moves last is iterated
    just outside `source`'s last dim, which stays innermost: the copy reads rows of
    `source` (its lanes' loads in a row, not 8 channels 4 KiB apart in one cache set)."""
    shape = source.type.get_shape()  # type: ignore[attr-defined]
    last = len(shape) - 1
    loop = order if order[-1] == last else [*(d for d in order if d != last), last]
    sizes = [target.type.get_shape()[order.index(k)] for k in range(len(shape))]  # type: ignore[attr-defined]
    body = Block(arg_types=[fast.INDEX] * len(sizes))
    args = [body.args[loop.index(k)] for k in range(len(shape))]  # source dim k's index
    zero = fast.constant(0)
    consts: list[Operation] = [zero]
    ops: list[Operation] = []
    idx: list[SSAValue] = []
    tests: list[SSAValue] = []
    for p, b, n, m in zip(args, below, shape, sizes):
        at: SSAValue = p
        if b:
            shift = fast.constant(b)
            sub = fast.index_op(arith.SubiOp, p, shift.result)
            consts.append(shift)
            ops.append(sub)
            at = sub.results[0]
            tests.append(_test(ops, at, "sge", zero.result))
        if m - b > n:
            end = fast.constant(n)
            consts.append(end)
            tests.append(_test(ops, at, "slt", end.result))
        idx.append(at)
    inside = tests[0]
    for t in tests[1:]:
        both = arith.AndIOp(inside, t)
        ops.append(both)
        inside = both.result
    safe = [fast.select(inside, i, zero.result) for i in idx]
    read = fast.load(source, [s.result for s in safe])
    value = fast.select(inside, read.results[0], fill)
    at_target = [args[k] for k in order]
    body.add_ops([*ops, *safe, read, value, fast.store(value.result, target, at_target)])
    body.add_op(scf.ReduceOp())
    nest, more = box_nest([sizes[k] for k in loop], body)
    return nest, [*consts, *more]


def _test(ops: list[Operation], lhs: SSAValue, predicate: str, rhs: SSAValue) -> SSAValue:
    test = fast.cmpi(lhs, rhs, predicate)
    ops.append(test)
    return test.result


@dataclass
class Padding:
    """The guarded reads of one buffer in one nest, and the border that serves them all."""

    reads: list[Read] = field(default_factory=list)

    def border(self) -> tuple[list[int], list[int]]:
        below = [max(r.below[k] for r in self.reads) for k in range(len(self.reads[0].below))]
        above = [max(r.above[k] for r in self.reads) for k in range(len(self.reads[0].above))]
        return below, above

    def fill(self) -> arith.ConstantOp | None:
        """A new constant of the value the guards give outside the buffer, where they all
        give the same."""
        consts = [r.value.rhs.owner for r in self.reads]
        assert all(isinstance(c, arith.ConstantOp) for c in consts)
        same = len({c.value for c in consts}) == 1  # type: ignore[union-attr]
        return consts[0].clone() if same else None  # type: ignore[return-value]


def top_level(op: Operation, fn: func.FuncOp) -> Operation:
    """The op of `fn`'s body that holds `op`."""
    while op.parent_block() is not fn.body.block:
        parent = op.parent_op()
        assert parent is not None
        op = parent
    return op


def pad(fn: func.FuncOp, nest: scf.ParallelOp, min_reuse: int = MIN_REUSE) -> int:
    """Pads the guarded reads of `nest`'s innermost reduction (see the module
    docstring); how many reads lost their guard."""
    loop = innermost_reduction(nest)
    if loop is None:
        return 0
    top = top_level(nest, fn)
    written = {o.memref for o in top.walk() if isinstance(o, memref.StoreOp | memref.AtomicRMWOp)}
    found: dict[SSAValue, Padding] = {}
    for load in [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]:
        buf = load.memref
        if buf in written or (isinstance(buf.owner, Operation) and top.is_ancestor(buf.owner)):
            continue
        read = guarded_read(load)
        if read is not None:
            found.setdefault(buf, Padding()).reads.append(read)
    count = 0
    for buf, padding in found.items():
        below, above = padding.border()
        shape = buf.type.get_shape()  # type: ignore[attr-defined]
        sizes = [n + b + a for n, b, a in zip(shape, below, above)]
        target, order = buf, list(range(len(shape)))
        if any(below) or any(above):
            fill = padding.fill()
            if fill is None or sum(reads(r.load) for r in padding.reads) < min_reuse * prod(sizes):
                continue
            order = innermost_order(padding, loop, nest)
            element = buf.type.element_type  # type: ignore[attr-defined]
            target = scratch(fn, element, [sizes[k] for k in order], "padded")
            copy, consts = pad_nest(buf, target, below, fill.result, order)
            fn.body.block.insert_ops_before([fill, *consts, copy], top)
        for r in padding.reads:
            count += 1
            _reroute(r, target, below, order)
    return count


def innermost_order(padding: Padding, loop: scf.ForOp, nest: scf.ParallelOp) -> list[int]:
    """The dims of a padded copy in their order: the buffer's, but for the dim that the
    innermost reduction `loop` steps through one by one in every read (a convolution's
    input channels), which goes last, so that the reduction reads the copy in a row,
    where no read depends on `nest`'s innermost dim (the dim that runs in lanes: the
    output channels of a convolution, the reads broadcast to them) and the dim is not
    the first (the images a weight gradient sums over)."""
    n = len(padding.reads[0].exprs)
    step, lanes = loop.body.block.args[0], nest.body.block.args[-1]
    stepped: set[int] = set()
    for r in padding.reads:
        forms = [affine_form(e) for e in r.exprs]
        if any(f is None or f[0].get(lanes) for f in forms):
            return list(range(n))
        by = [k for k, f in enumerate(forms) if f[0].get(step)]  # type: ignore[index]
        if len(by) != 1 or forms[by[0]][0][step] != 1:  # type: ignore[index]
            return list(range(n))
        stepped.add(by[0])
    if len(stepped) != 1 or (k := stepped.pop()) == n - 1 or k == 0:
        return list(range(n))
    return [*(d for d in range(n) if d != k), k]


def _reroute(r: Read, target: SSAValue, below: list[int], order: list[int]) -> None:
    """Replaces guarded read `r` with an unguarded read of `target` shifted by `below`,
    its indices in `order`."""
    ops: list[Operation] = []
    idx: list[SSAValue] = []
    for e, b in zip(r.exprs, below):
        if b:
            base, c = e, 0  # e = base + c: the shift goes into c
            if isinstance(e.owner, arith.AddiOp) and int_constant(e.owner.rhs) is not None:
                base, c = e.owner.lhs, int_constant(e.owner.rhs) or 0
            if c + b:
                shift = fast.constant(c + b)
                add = fast.index_op(arith.AddiOp, base, shift.result)
                ops += [shift, add]
                base = add.results[0]
            e = base
        idx.append(e)
    old = [*r.load.indices, r.value.cond]
    Rewriter.replace_op(r.value, [*ops, fast.load(target, [idx[k] for k in order])])
    r.load.detach()
    r.load.erase()
    erase_dead(old)


@dataclass(frozen=True)
class LoopsPadPass(ModulePass):
    """Replaces guarded reads of reductions with reads of zero-bordered copies.

    `ir-opt k.mlir -p 'loops-pad{min-reuse=8}'`
    """

    name = "loops-pad"

    min_reuse: int = MIN_REUSE

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                pad(fn, nest, self.min_reuse)
