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
"""

from __future__ import annotations

from xdsl.dialects import arith, gpu, scf
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation

from gradfuse.backend.c.loops import CPURenderer, Segment, _trips
from gradfuse.backend.c.nest import constant


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
        self.emit("const long tid = 0;", 1)
        self.emit(f"#pragma omp parallel for if({work} >= {self.t.parallel_work})", 1)
        self.emit(f"for (long bid = 0; bid < {rows}; bid++) {{", 1)
        self.sharing = False  # a thread runs a row's phases, in order
        try:
            for op in block.ops:
                if op in phases:
                    self.segment(phases[op])
                elif not isinstance(op, gpu.BarrierOp):
                    self.op(op, 2)
        finally:
            self.sharing = True
        self.emit("}", 1)
        return head + "\n".join(self.lines) + "\n}\n"
