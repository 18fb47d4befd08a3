"""`loops-vectorize`: which loop of each nest runs in SIMD lanes.

Two choices per innermost `scf.parallel`, as in TVM's `vectorize` primitive (and as
the C backend made them from index arithmetic before):
- a reduction `scf.for` (no loop inside it, its carried values combined by `addf` or
  `maximumf`) that reads memory contiguously along its index (a dot product) is
  vectorised, each lane a partial sum (OpenMP's `reduction` clause), unless every read
  is contiguous or the same across neighbouring points of the nest's innermost dim,
  with at least 8 of them (a long innermost dim vectorises without reassociating);
- else the nest's innermost dim (an elementwise kernel, a column sum).
A nest that adds to points that may repeat (`memref.atomic_rmw`) stays scalar. A
reduction with no nest of its own (a phase of a `kernel.rows` with one output per row,
a kernel with one output) is vectorised when it reads contiguously along its index.

```
// ir-opt mm.mlir -p loops-vectorize
%s = scf.for %d2 = %c0 to %c255 step %c1 iter_args(%acc = %zero) -> (f32) {
  %a = memref.load %x[%d0, %d2] ...
// becomes
%s = scf.for %d2 = ... { ... } {gradfuse.simd}
```
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import memref, scf
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from gradfuse.diagnostics import GradfuseError
from gradfuse.passes.loops.lanes import DEFAULT_LANES, WIDTHS, strip_mine
from gradfuse.passes.loops.loop_ir import (
    REDUCING,
    SIMD,
    depends,
    int_constant,
    kernel_functions,
    trips,
)

COMBINING = tuple(REDUCING)
MIN_LANES = 8
"""Points of an innermost dim below which a contiguous reduction is vectorised instead,
and steps of a reduction below which it is not vectorised along its index."""


def innermost_reduction(nest: scf.ParallelOp) -> scf.ForOp | None:
    """The last `scf.for` under `nest` that carries values and holds no loop."""
    found = reductions(nest)
    return found[-1] if found else None


def reductions(nest: scf.ParallelOp) -> list[scf.ForOp]:
    """The `scf.for`s under `nest` that carry values and hold no loop, in order."""
    return [
        op
        for op in nest.body.walk()
        if isinstance(op, scf.ForOp)
        and op.iter_args
        and not any(isinstance(o, scf.ForOp | scf.ParallelOp) for o in op.body.walk())
    ]


def contiguous(loop: scf.ForOp) -> bool:
    """Whether the reduction `loop` combines by adds or maxima, holds no loop, reads
    some buffer contiguously along its index and runs at least `MIN_LANES` times (a
    window's 4 taps are no dot product to run in lanes)."""
    if 0 < trips(loop.lb, loop.ub, loop.step) < MIN_LANES:
        return False
    iv = loop.body.block.args[0]
    y = loop.body.block.last_op
    if y is None or not all(isinstance(v.owner, COMBINING) for v in y.operands):
        return False
    if any(
        isinstance(o, scf.ForOp | scf.ParallelOp | memref.AtomicRMWOp) for o in loop.body.walk()
    ):
        return False
    loads = [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]
    return any(o.indices and o.indices[-1] == iv for o in loads)


def along_reduction(loop: scf.ForOp, nest: scf.ParallelOp) -> bool:
    """Whether to vectorise the reduction `loop` rather than `nest`'s innermost dim."""
    if not contiguous(loop):
        return False
    loads = [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]
    last = nest.body.block.args[-1]
    count = int_constant(nest.upperBound[-1]) or 0
    across = count >= MIN_LANES and all(
        (o.indices and o.indices[-1] == last) or not any(depends(i, last) for i in o.indices)
        for o in loads
    )
    return not across


def innermost_nests(fn: Operation) -> list[scf.ParallelOp]:
    """The innermost `scf.parallel`s in `fn` (what most `loops-*` passes transform),
    listed before any is rewritten, in program order: one walk, each op asking whether
    it holds an `scf.parallel` once."""
    found: list[scf.ParallelOp] = []

    def holds_nest(op: Operation) -> bool:  # `op` is, or holds, an scf.parallel
        inside = False
        for region in op.regions:
            for block in region.blocks:
                for o in block.ops:
                    inside = holds_nest(o) or inside
        if isinstance(op, scf.ParallelOp):
            if not inside:
                found.append(op)
            return True
        return inside

    holds_nest(fn)
    return found


def in_nest(op: Operation, nests: Collection[Operation]) -> bool:
    """Whether `op` lies in one of `nests` (innermost `scf.parallel`s)."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, scf.ParallelOp):
        parent = parent.parent_op()
    return parent is not None and parent in nests


def vectorize(nest: scf.ParallelOp, widest: int = DEFAULT_LANES) -> None:
    """Marks the loop of `nest` (an innermost `scf.parallel`) that runs in lanes, or
    strip-mines it into vectors of up to `widest` lanes."""
    if any(isinstance(o, memref.AtomicRMWOp) for o in nest.walk()):
        return
    loop = innermost_reduction(nest)
    if loop is not None and along_reduction(loop, nest):
        for other in reductions(nest):  # (a batch norm's gradient: two sums of a row)
            if other is loop or along_reduction(other, nest):
                other.attributes[SIMD] = UnitAttr()
    elif not strip_mine(nest, widest):
        nest.attributes[SIMD] = UnitAttr()


@dataclass(frozen=True)
class LoopsVectorizePass(ModulePass):
    """Runs one loop per innermost nest of each kernel function in lanes: strip-mined
    into vectors, or marked `gradfuse.simd`.

    `ir-opt k.mlir -p loops-vectorize` (vectors of 8 lanes), `-p 'loops-vectorize{lanes=16}'`
    (of 16 where a dim has 16 points, else of 8)
    """

    name = "loops-vectorize"

    lanes: int = DEFAULT_LANES
    """The widest vectors, in floats: one of `WIDTHS`."""

    def __post_init__(self) -> None:
        if self.lanes not in WIDTHS:
            raise GradfuseError(
                f"loops-vectorize: lanes={self.lanes} is not a vector width of the C target"
                f" (choose from {', '.join(map(str, WIDTHS))})"
            )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                vectorize(nest, self.lanes)
            nests = set(innermost_nests(fn))  # (after strip-mining: the nests now)
            for loop in fn.walk():  # a reduction with no nest of its own (one output)
                if (
                    isinstance(loop, scf.ForOp)
                    and not in_nest(loop, nests)
                    and loop.iter_args
                    and contiguous(loop)
                ):
                    loop.attributes[SIMD] = UnitAttr()
