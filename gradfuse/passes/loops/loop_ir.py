"""What the loop passes and the C backend share about the loop IR: the attributes by
which the passes hand their decisions to the renderer, the questions both ask of
index values, and the rewrite that the passes which split a nest share (`peel`).

`gradfuse.omp = N` on an `scf.parallel`: its N outer dims are shared among OpenMP
threads (`loops-parallelize`); `gradfuse.simd` on an `scf.parallel` (its innermost dim)
or on an `scf.for` that carries sums: the loop is vectorised (`loops-vectorize`):

    "scf.parallel"(...) ({ ... }) {gradfuse.omp = 1 : i64, gradfuse.simd}
"""

from collections.abc import Iterator, Sequence
from math import prod
from typing import NamedTuple

from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, MemRefType, ModuleOp, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr

from gradfuse.passes.lib import fast_ops as fast

KERNEL = "gradfuse.kernel"
"""Marks a kernel function and the host calls of it (`convert-kernel-to-loops`)."""
OMP = "gradfuse.omp"
SIMD = "gradfuse.simd"
REDUCING = {arith.AddfOp: "+", arith.MaximumfOp: "max"}
"""The ops by which a vectorised reduction may combine, with OpenMP's name for each."""

LOADS = (memref.LoadOp, vector.LoadOp, vector.TransferReadOp)
STORES = (memref.StoreOp, vector.StoreOp, vector.TransferWriteOp)
WRITES = (*STORES, memref.AtomicRMWOp)
"""The ops that read and write a buffer, in lanes or not: a write's buffer is its second
operand (after the value), a read's its first."""


def buffer_of(op: Operation) -> SSAValue:
    """The memref that a load or a write accesses (its first operand, or its second after
    the value a write writes)."""
    return op.operands[1 if isinstance(op, WRITES) else 0]


def is_kernel(op: Operation) -> bool:
    """Whether `op` is a kernel function or a host call of one."""
    return KERNEL in op.attributes


def int_constant(v: SSAValue) -> int | None:
    """The value of an integer `arith.constant`, else None."""
    op = v.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


def depends(v: SSAValue, target: SSAValue) -> bool:
    """Whether `v` is computed from `target` (through ops, not block arguments)."""
    todo, seen = [v], set()
    while todo:  # each op once: index expressions share their subexpressions
        v = todo.pop()
        if v is target:
            return True
        owner = v.owner
        if isinstance(owner, Operation) and owner not in seen:
            seen.add(owner)
            todo.extend(owner.operands)
    return False


def dependents(target: SSAValue, scope: Operation) -> set[SSAValue]:
    """`target` and the values of `scope`'s ops computed from it (as `depends` counts:
    through ops, not block arguments), in one walk: for many `depends(v, target)`
    questions about one `target` defined in or at `scope`. For the index `%i` of
    `scf.for %i ... { %a = arith.muli %i, %c ; %b = arith.addi %a, %j }`, `{%i, %a, %b}`."""
    found = {target}
    for op in scope.walk():  # in order: a value is reached before its uses
        if any(v in found for v in op.operands):
            found.update(op.results)
    return found


def own_index(indices: Sequence[SSAValue], d: SSAValue) -> int | None:
    """The position of the index that is `d` itself, where no other index depends on
    `d` (a read that lanes along `d` read contiguously once that index is last); else
    None. `own_index([%d4, %d1, %d5], %d1)` -> 1."""
    found = [k for k, i in enumerate(indices) if depends(i, d)]
    return found[0] if len(found) == 1 and indices[found[0]] is d else None


def guarded_select(load: memref.LoadOp) -> arith.SelectOp | None:
    """`select(g, load, c)`, the only use of `load`, c a constant: the value of a guarded
    read as the lowering writes it (`c` where guard `g` fails), else None."""
    uses = list(load.res.uses)
    if len(uses) != 1 or not isinstance(sel := uses[0].operation, arith.SelectOp):
        return None
    if sel.lhs is not load.res or not isinstance(sel.rhs.owner, arith.ConstantOp):
        return None
    return sel


def guard_tests(g: SSAValue) -> list[arith.CmpiOp] | None:
    """The tests of a guard that is a conjunction (`andi`) of `cmpi sge t, 0` (what the
    lowering of a padded window writes), else None."""
    op = g.owner
    if isinstance(op, arith.AndIOp):
        a, b = guard_tests(op.lhs), guard_tests(op.rhs)
        return None if a is None or b is None else a + b
    if isinstance(op, arith.CmpiOp) and op.predicate.value.data == 5 and int_constant(op.rhs) == 0:
        return [op]  # (predicate 5: sge)
    return None


def inside(v: SSAValue, loop: scf.ForOp) -> bool:
    """Whether `v` is computed in `loop` (or is one of its block's arguments)."""
    owner = v.owner
    return loop.is_ancestor(owner.parent_op() if isinstance(owner, Block) else owner)


def erase_dead(values: list[SSAValue]) -> None:
    """Erases the pure arith ops among the owners of `values` that nothing uses, and then
    those of their operands."""
    work = list(values)
    while work:
        op = work.pop().owner
        if isinstance(op, Operation) and op.dialect_name() == "arith" and op.parent is not None:
            if not any(r.uses for r in op.results):
                work.extend(op.operands)
                op.detach()
                op.erase()


def kernel_functions(module: ModuleOp) -> Iterator[func.FuncOp]:
    """The kernel functions of `module` (what the `loops-*` passes transform)."""
    for fn in module.ops:
        if isinstance(fn, func.FuncOp) and is_kernel(fn):
            yield fn


def trips(lb: SSAValue, ub: SSAValue, step: SSAValue) -> int:
    """The iterations of a loop from `lb` to `ub` by `step`, 0 where one is not a constant."""
    lo, hi, by = int_constant(lb), int_constant(ub), int_constant(step)
    if lo is None or hi is None or not by:
        return 0
    return -(-(hi - lo) // by)


def loop_bounds(iv: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue] | None:
    """The lower bound, upper bound and step of the loop whose index `iv` is (a dim of an
    `scf.parallel` or the index of an `scf.for`), else None."""
    owner = iv.owner
    loop = owner.parent_op() if isinstance(owner, Block) else None
    if isinstance(loop, scf.ForOp) and iv is loop.body.block.args[0]:
        return loop.lb, loop.ub, loop.step
    if isinstance(loop, scf.ParallelOp):
        k = list(loop.body.block.args).index(iv)
        return loop.lowerBound[k], loop.upperBound[k], loop.step[k]
    return None


def scratch(fn: func.FuncOp, element: Attribute, shape: list[int], name: str) -> SSAValue:
    """A buffer of `shape` that lives through one call of kernel function `fn`: its
    `memref.alloc` first in the function, its `memref.dealloc` before the return (static
    storage in C: `loop_render`)."""
    alloc = memref.AllocOp.get(element, shape=shape)
    alloc.memref.name_hint = name
    entry = fn.body.block
    first, end = entry.first_op, entry.last_op
    assert first is not None and end is not None
    entry.insert_op_before(alloc, first)
    entry.insert_op_before(memref.DeallocOp.get(alloc.memref), end)
    return alloc.memref


def collapsed(source: SSAValue, cut: int) -> memref.CollapseShapeOp:
    """A view of `source` whose dims from `cut` on are one (the same elements; the C
    target prints the same pointer): `memref<8x4x3x3xf32>` at 1 is `memref<8x36xf32>`."""
    ty = source.type
    assert isinstance(ty, MemRefType)
    shape = list(ty.get_shape())
    groups = [[k] for k in range(cut)] + [list(range(cut, len(shape)))]
    return memref.CollapseShapeOp.create(
        operands=[source],
        result_types=[MemRefType(ty.element_type, [*shape[:cut], prod(shape[cut:])])],
        properties={
            "reassociation": ArrayAttr(
                [ArrayAttr([IntegerAttr(k, i64) for k in g]) for g in groups]
            )
        },
    )


def dim_trips(nest: scf.ParallelOp, dim: int) -> int:
    """The iterations of dim `dim` of `nest`, 0 where a bound is not a constant."""
    return trips(nest.lowerBound[dim], nest.upperBound[dim], nest.step[dim])


def block_like(args: Sequence[SSAValue]) -> Block:
    """A new block whose arguments have the types and names of `args` (loop indices)."""
    block = Block(arg_types=[a.type for a in args])
    for old, new in zip(args, block.args):
        new.name_hint = old.name_hint
    return block


def replace_nest(
    nest: scf.ParallelOp,
    body: Block,
    bounds: tuple[Sequence[SSAValue], Sequence[SSAValue], Sequence[SSAValue]],
) -> scf.ParallelOp:
    """A new nest in place of `nest`, with `nest`'s attributes, `bounds` (lower, upper,
    step) and `body`; `nest` is erased. The rewrite of passes that reorder or split dims."""
    new = scf.ParallelOp(*bounds, Region(body))
    new.attributes.update(nest.attributes)
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_op_before(new, nest)
    nest.detach()
    nest.erase()
    return new


def peel(nest: scf.ParallelOp, dim: int, count: int, step: int, body: Block) -> scf.ParallelOp:
    """Inserts before `nest` a nest running `body` over the first `count` iterations of
    dim `dim` stepping by `step` (the other dims as in `nest`); `nest` keeps the points
    after them, and is erased where there are none. The new nest.

        scf.parallel (%d0) = (%c0) to (%c45) step (%c1)   // peel(nest, 0, 40, 8, lanes)
        // becomes
        scf.parallel (%d0) = (%c0) to (%c40) step (%c8) { lanes }
        scf.parallel (%d0) = (%c40) to (%c45) step (%c1)
    """
    lo, hi = int_constant(nest.lowerBound[dim]), int_constant(nest.upperBound[dim])
    assert lo is not None and hi is not None
    end, wide = fast.constant(lo + count), fast.constant(step)
    upper, steps = list(nest.upperBound), list(nest.step)
    upper[dim], steps[dim] = end.result, wide.result
    main = scf.ParallelOp(list(nest.lowerBound), upper, steps, Region(body))
    main.attributes.update(nest.attributes)
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_ops_before([end, wide, main], nest)
    if lo + count >= hi:
        nest.detach()
        nest.erase()
    else:
        nest.operands[dim] = end.result  # the rest from `end`
    return main


Form = tuple[dict[SSAValue, int], int]
"""An affine index value: coefficients of loop indices, and a constant."""


def affine_form(v: SSAValue, memo: dict[SSAValue, Form | None] | None = None) -> Form | None:
    """`v` as an affine form of loop indices (`scf.for`/`scf.parallel` block arguments),
    through constants, `addi`, `subi` and `muli` by a constant; else None. `memo` keeps
    the forms found, for a caller that asks of many indices of unchanging IR."""
    if memo is not None and v in memo:
        return memo[v]
    form = _affine_form(v, memo)
    if memo is not None:
        memo[v] = form
    return form


def _affine_form(v: SSAValue, memo: dict[SSAValue, Form | None] | None) -> Form | None:
    c = int_constant(v)
    if c is not None:
        return {}, c
    if isinstance(v.owner, Block):
        return ({v: 1}, 0) if loop_range(v) is not None else None
    op = v.owner
    if not isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp):
        return None
    a, b = affine_form(op.lhs, memo), affine_form(op.rhs, memo)
    if a is None or b is None:
        return None
    if isinstance(op, arith.MuliOp):
        if a[0] and b[0]:
            return None
        (k, (terms, const)) = (a[1], b) if not a[0] else (b[1], a)
        return {iv: k * c for iv, c in terms.items() if k * c}, k * const
    sign = -1 if isinstance(op, arith.SubiOp) else 1
    terms = dict(a[0])
    for iv, c in b[0].items():
        terms[iv] = terms.get(iv, 0) + sign * c
    return {iv: c for iv, c in terms.items() if c}, a[1] + sign * b[1]


def loop_range(iv: SSAValue) -> tuple[int, int] | None:
    """The first and last value of a loop index with constant bounds, else None."""
    bounds = loop_bounds(iv)
    if bounds is None:
        return None
    n, lo, step = trips(*bounds), int_constant(bounds[0]), int_constant(bounds[2])
    if n <= 0 or lo is None or step is None:
        return None
    return lo, lo + (n - 1) * step


def transfer_dim(op: vector.TransferReadOp | vector.TransferWriteOp) -> int:
    """The buffer dim a transfer's lanes run along (its permutation map's one result)."""
    (dim,) = op.permutation_map.data.results
    assert isinstance(dim, AffineDimExpr)
    return dim.position


class Write(NamedTuple):
    """A transfer write, its buffer, the dim and count of its lanes, and the affine
    forms of its indices: found once for the pairwise `disjoint` tests of a run (read
    through the op's properties each time, they took most of the C printer's time)."""

    op: vector.TransferWriteOp
    source: SSAValue
    along: int
    lanes: int
    forms: list[Form | None]


def disjoint(x: Write, y: Write) -> bool:
    """Whether two transfer writes along the same dim of one buffer provably write no
    element in common: some other index differs by a constant, or the lane dim's by at
    least the lanes."""
    if x.source != y.source or x.along != y.along:
        return False
    for k, (i, j) in enumerate(zip(x.forms, y.forms)):
        if i is not None and j is not None and i[0] == j[0]:
            apart = abs(i[1] - j[1])
            if apart and (k != x.along or apart >= x.lanes):
                return True
    return False


def writes(
    ops: list[Operation], i: int, memo: dict[SSAValue, Form | None] | None = None
) -> tuple[list[Write], int]:
    """The run of transfer writes from `ops[i]` that write pairwise disjoint elements of
    one buffer (constants between them print nothing), and the index after it; ([], i)
    where `ops[i]` is not one (`memo`: `affine_form`'s)."""
    run: list[Write] = []
    j = i
    while j < len(ops):
        op = ops[j]
        if isinstance(op, vector.TransferWriteOp):
            lanes = op.vector.type.get_shape()[0]  # type: ignore[attr-defined]
            forms = [affine_form(v, memo) for v in op.indices]
            write = Write(op, op.source, transfer_dim(op), lanes, forms)
            if not all(disjoint(write, w) for w in run):
                break
            run.append(write)
        elif not (run and isinstance(op, arith.ConstantOp)):
            break
        j += 1
    return run, (j if run else i)
