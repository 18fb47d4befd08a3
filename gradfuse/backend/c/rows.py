"""Row-by-row kernels (`kernel.rows`, see `passes/rows_lowering`) on the CPU.

On a GPU such a kernel is one block per row, its threads striding over each phase's
points, barriers between phases. On the CPU the rows are a loop, and each phase is
the loop nest that `CPURenderer.segment` makes of a kernel (lanes, simd pragmas),
over the points of one row, without its work-sharing: the rows are independent, so
OpenMP (when the work is large enough) shares them, and a thread runs a row's phases
one after the other, no barrier needed:

    static void r3(float* __restrict__ v0, ..., long grid, long block) {
      const long tid = 0;
      #pragma omp parallel for if(2048 >= 1048576)
      for (long bid = 0; bid < 32; bid++) {
        long v4 = bid / 16; long v5 = bid % 16;          // the row
        for (long i0 = 0; i0 < 64; i0++) { ... }         // phase 1
        ...                                              // phase 2
      }
    }

Where a phase sums a weight that every row reads (an LSTM time step's `h @ W_hh`), row
by row each row reads all of it again, and its sums cannot be blocked across rows. Such
a kernel runs phase by phase instead: each phase is a loop nest over all rows (the row
its outermost loop, `i0`), its points shared among the threads, and a barrier after it.
The rows are independent, so only the order changes; the nest is `segment`'s, so the
sums of the weight phase are packed and run in register blocks that span rows:

    #pragma omp parallel if(3240020 >= 1048576)
    {
      #pragma omp for collapse(1) nowait
      for (long i0 = 0; i0 < 20; i0++) ...               // phase 1, every row
      #pragma omp barrier
      ...                                                // phase 2: the packed sums
    }
"""

from __future__ import annotations

from xdsl.dialects import arith, gpu, memref, scf
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Block, Operation, SSAValue

from gradfuse.backend.c.loops import (
    CPURenderer,
    Segment,
    _innermost_reduction,
    _trips,
)
from gradfuse.backend.c.nest import constant
from gradfuse.passes.loops.loop_ir import depends


def is_rows(fn: gpu.FuncOp) -> bool:
    """Whether `fn` is the lowering of a `kernel.rows`."""
    kind = fn.attributes.get("gradfuse.kind")
    return isinstance(kind, StringAttr) and kind.data == "rows"


def row_count(fn: gpu.FuncOp) -> int:
    """The rows of a row-by-row kernel (its `gradfuse.rows` attribute)."""
    return int(fn.attributes["gradfuse.rows"].value.data)  # type: ignore[attr-defined]


def _phase(loop: scf.ForOp) -> Segment | None:
    """The segment of a phase loop: `scf.for` over trips, `p = it * block + tid`,
    `scf.if p < count { ... }`."""
    ops = list(loop.body.block.ops)
    branch = next((o for o in ops if isinstance(o, scf.IfOp)), None)
    if branch is None:
        return None
    cmp = branch.cond.owner
    if not isinstance(cmp, arith.CmpiOp):
        return None
    count = constant(cmp.rhs)
    if count is None:
        return None
    return Segment(0, count, branch.true_region.block, cmp.lhs)


PURE = (arith.ConstantOp, arith.CeilDivUIOp, gpu.ThreadIdOp, gpu.BlockDimOp, gpu.GridDimOp)


def _shared_read(seg: Segment, row: SSAValue) -> bool:
    """Whether the phase `seg` sums what every row reads (a weight: a read in its
    reduction loop at indices that do not depend on the row)."""
    loop = _innermost_reduction(seg.block)
    return loop is not None and any(
        isinstance(op, memref.LoadOp) and not any(depends(i, row) for i in op.indices)
        for op in loop.body.block.ops
    )


def _shared_row(block: Block, phases: dict[Operation, Segment]) -> SSAValue | None:
    """The row (the block id) where each phase is to run over all rows (the threads
    sharing its points, a barrier after each phase) rather than each row's phases in
    turn: where a phase sums what every row reads (the rows then share each read of the
    weight, and its sums run in register blocks of several rows), and the ops between
    phases are index arithmetic on no row; else None."""
    ids = [op.result for op in block.ops if isinstance(op, gpu.BlockIdOp)]
    if len(ids) != 1 or not any(_shared_read(s, ids[0]) for s in phases.values()):
        return None
    for op in block.ops:
        if op in phases or isinstance(op, gpu.BarrierOp | gpu.ReturnOp | gpu.BlockIdOp):
            continue
        if not isinstance(op, PURE) or ids[0] in op.operands:
            return None
    return ids[0]


class RowsRenderer(CPURenderer):
    """`CPURenderer` that also renders row-by-row kernels (see the module docstring)."""

    def kernel(self, fn: gpu.FuncOp) -> str:
        if not is_rows(fn):
            return super().kernel(fn)
        block = fn.body.block
        self.names, self.lines, self.pragmas = {}, [], {}
        head = self.head(fn)
        phases: dict[Operation, Segment] = {}
        for op in block.ops:
            if isinstance(op, scf.ForOp):
                seg = _phase(op)
                if seg is None:
                    return super().kernel(fn)
                phases[op] = seg
        rows = row_count(fn)
        work = rows * sum((s.hi - s.lo) * _trips(s.block) for s in phases.values())
        row = _shared_row(block, phases)
        clause = f"if({work} >= {self.t.parallel_work})"
        if row is None:  # a thread runs a row's phases, in order
            self.emit("const long tid = 0;", 1)
            self.emit(f"#pragma omp parallel for {clause}", 1)
            self.emit(f"for (long bid = 0; bid < {rows}; bid++) {{", 1)
            self.sharing = False
        else:  # each phase over all rows, a barrier after it
            self.emit(f"#pragma omp parallel {clause}", 1)
            self.emit("{", 1)
            self.emit("const long tid = 0;", 1)
        try:
            for op in block.ops:
                if op in phases:
                    phases[op].row, phases[op].rows = row, rows
                    self.segment(phases[op])
                    if row is not None:
                        self.emit("#pragma omp barrier", 1)
                elif not isinstance(op, gpu.BarrierOp) and (row is None or op is not row.owner):
                    self.op(op, 2 if row is None else 1)
        finally:
            self.sharing = True
        self.emit("}", 1)
        return head + "\n".join(self.lines) + "\n}\n"
