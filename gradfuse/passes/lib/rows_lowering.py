"""Lowering of a `kernel.rows` (kernels run row by row) to a `gpu.func`.

One block per row: the block id is delinearised into the row indices. Each kernel
is a phase: the block's threads stride over the kernel's points in the row (a loop
with the same trip count in every thread, so that the barrier after it is reached
by all of them), and a `gpu.barrier` separates one phase from the next:

```
gpu.func @r3(%x: memref<2x16x64xf32>, %mean: memref<2x16xf32>, ...) kernel {
  %tid = gpu.thread_id x
  %bid = gpu.block_id x
  %bdim = gpu.block_dim x
  %b = arith.divui %bid, %c16 : index          // the row (b, s)
  %s = arith.remui %bid, %c16 : index
  %trips = arith.ceildivui %c1, %bdim : index   // phase 1: one point per row
  scf.for %it = %c0 to %trips step %c1 {
    %p = arith.addi (%it * %bdim), %tid : index
    scf.if (%p < %c1) { ... the row mean, a loop over 64 ... }
  }
  gpu.barrier
  %trips2 = arith.ceildivui %c64, %bdim : index // phase 2: 64 points per row
  scf.for ... { ... scf.if (%p < %c64) { %j = %p ... } }
  gpu.return
}
```

In the `cuda` pipeline, a phase with one output per row and a long reduction can
have the whole block reduce together (`block_reduce`).

On the CPU (`convert-kernel-to-loops`) a row-by-row run is a loop over rows with each
phase a loop nest (`loops-distribute` runs a phase over all rows where they share a
weight); the lowered interpreter runs the phases of a block's threads
barrier by barrier.
"""

from __future__ import annotations

from math import prod

from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import i64
from xdsl.ir import SSAValue

from gradfuse.dialects import kernel as kd
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.lib.block_reduce_lowering import (
    BLOCK_REDUCE_ATTR,
    THREADS,
    cooperative,
    lower_cooperative,
)
from gradfuse.passes.lib.gpu_func import func_frame, kernel_func, launch_shape
from gradfuse.passes.lib.kernel_lowering import KernelBuilder


def block_threads(rows: kd.RowsOp) -> int:
    """Threads per block: the most points of one row in any phase, in whole warps, at
    most `MAX_BLOCK` (`gpu_func.launch_shape`); `block_reduce.THREADS` where the block reduces together."""
    if BLOCK_REDUCE_ATTR in rows.attributes:
        return THREADS
    n = len(rows.row_sizes)
    most = max(
        prod(k.domain_sizes[n : k.num_parallel])
        for k in rows.body.block.ops
        if isinstance(k, kd.KernelOp)
    )
    return launch_shape(most)[1]


class RowsBuilder(KernelBuilder):
    """Builds the body of the `gpu.func` of one `kernel.rows` (see the module docstring)."""

    def lower_rows(self, rows: kd.RowsOp, args: dict[SSAValue, SSAValue]) -> None:
        tid = self.thread_id()
        bid = self.add(fast.gpu_index(gpu.BlockIdOp))
        bdim = self.add(fast.gpu_index(gpu.BlockDimOp))
        sizes = rows.row_sizes
        row = self.delinearize(bid, sizes, rows.location)
        kernels = [k for k in rows.body.block.ops if isinstance(k, kd.KernelOp)]
        together = BLOCK_REDUCE_ATTR in rows.attributes
        for i, k in enumerate(kernels):
            if i:
                self.add(gpu.BarrierOp(), k.location)
            if together and cooperative(k, len(row)):
                lower_cooperative(self, k, row, tid, args)
            else:
                self.phase(k, row, tid, bdim, args)
        self.add(gpu.ReturnOp.create())

    def phase(
        self,
        k: kd.KernelOp,
        row: list[SSAValue],
        tid: SSAValue,
        bdim: SSAValue,
        args: dict[SSAValue, SSAValue],
    ) -> None:
        """Kernel `k` at every point of the row, the block's threads striding over them."""
        inner = k.domain_sizes[len(row) : k.num_parallel]
        count = self.const(prod(inner))
        trips = self.add(fast.index_op(arith.CeilDivUIOp, count, bdim), k.location)
        with self.counted_loop(trips, [], k.location) as (body, _):
            it = body.args[0]
            base = self.add(fast.index_op(arith.MuliOp, it, bdim, flags=True), k.location)
            p = self.add(fast.index_op(arith.AddiOp, base, tid, flags=True), k.location)
            cond = self.add(fast.cmpi(p, count, "ult"), k.location)
            with self.if_then(cond, k.location):
                point = self.delinearize(p, inner, k.location)
                self.lower_kernel_at(k, [*row, *point], args)
            self.add(fast.scf_yield())


def build_rows_func(
    name: str, rows: kd.RowsOp
) -> tuple[gpu.FuncOp, list[SSAValue], tuple[int, int]]:
    """The `gpu.func` of a `kernel.rows`, its host buffer operands and its launch shape
    (blocks: one per row, threads per block)."""
    kernels = [k for k in rows.body.block.ops if isinstance(k, kd.KernelOp)]
    host, entry, args = func_frame(kernels)
    RowsBuilder(entry).lower_rows(rows, args)
    blocks, threads = prod(rows.row_sizes), block_threads(rows)
    fn = kernel_func(name, entry, "rows", blocks * threads, rows.location)
    fn.attributes["gradfuse.rows"] = fast.scalar_attr(blocks, i64)
    return fn, host, (blocks, threads)
