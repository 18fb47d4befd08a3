"""`loops-parallelize`: the loop nests worth running on several threads, chosen by work.

A parallel region costs microseconds (far more when another process holds a core),
so only a nest whose points x inner iterations reach `min-work` is shared among OpenMP
threads: its outermost `scf.parallel` gets `gradfuse.omp = N` (the C backend collapses
its N outer dims into one loop that the threads share). N is the fewest outer dims
that give the threads `chunks` iterations to share, or all of them: the dims inside
stay loops of their own, whose invariant index arithmetic gcc hoists, where a loop
collapsed with them would step and carry every index each iteration (DCGAN b8's
[512, 256, 4, 4] weight copy, one thread: 4.5 ms collapsed five dims deep, 2.7 ms two;
its convolution 6.8 -> 6.3 ms). As TVM's `parallel` schedule primitive (on a fused
outer loop) and MLIR's `async-parallel-for`, it marks the outermost loop only:

```
// ir-opt k.mlir -p loops-parallelize{min-work=1000}
"scf.parallel"(...) ({ ^bb0(%d0: index, %d1: index): ... }) : (...) -> ()
// becomes, where 2 x 4 points x 255 steps >= 1000 (and 2 x 4 < 64 chunks)
"scf.parallel"(...) ({ ... }) {gradfuse.omp = 2 : i64} : (...) -> ()
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Block
from xdsl.passes import ModulePass

from gradfuse.passes.loops.loop_ir import OMP, dim_trips, int_constant, kernel_functions

PARALLEL_WORK = 1 << 16
"""The default `min-work`: 64K points x inner iterations, a sixteenth of the threshold
that the C backend's renderer of GPU grids used (gone with it). An optimizer's
update of a [128, 128, 3, 3] weight (147K points, each a few loads and stores) takes
tens of microseconds, a parallel region a few: at 2^20, ResNet-18's SGD kernel ran its
every nest on one thread (2 threads: 11.7 ms a 3-step chunk against 11.2 on one).
At 2^16, 2 threads: DCGAN b8 142-144 -> 131-134 ms a step, ResNet-18 b8 76-80 -> 74-75
(best of 5, two alternating runs; one thread unchanged; 2-core developer machine)."""
CHUNKS = 64
"""The default `chunks`: iterations of the collapsed outer dims enough to balance the
threads of a large machine (16 cores: 4 each), so the dims inside need not join them."""


def trips(loop: scf.ForOp | scf.ParallelOp, points: bool = False) -> int:
    """The iterations of `loop` (all its dims), 1 where a bound is not a constant;
    `points`: the points it covers instead (a loop stepping by 8 lanes, or over 4
    jammed rows, covers 8 or 4 points an iteration)."""
    if isinstance(loop, scf.ForOp):
        lbs, ubs, steps = [loop.lb], [loop.ub], [loop.step]
    else:
        lbs, ubs, steps = list(loop.lowerBound), list(loop.upperBound), list(loop.step)
    n = 1
    for lo, hi, st in zip(lbs, ubs, steps):
        a, b, s = int_constant(lo), int_constant(hi), int_constant(st)
        if a is None or b is None or not s:
            return 1
        n *= max(0, b - a if points else -(-(b - a) // s))
    return n


def shared_dims(nest: scf.ParallelOp, chunks: int) -> int:
    """The fewest outer dims of `nest` with at least `chunks` iterations, else all."""
    n, count = len(nest.body.block.args), 1
    for k in range(n):
        count *= max(0, dim_trips(nest, k))  # (0 where a bound is not a constant: all)
        if count >= chunks:
            return k + 1
    return n


def work(block: Block) -> int:
    """Innermost iterations under `block`, one for `block` itself: the cost of its ops
    counted once, `scf.for`s by their trip counts, `scf.parallel`s by their points
    (sequences of nests add up)."""
    total = 1
    for op in block.ops:
        if isinstance(op, scf.ForOp | scf.ParallelOp):
            total += trips(op, isinstance(op, scf.ParallelOp)) * work(op.body.block)
    return total


@dataclass(frozen=True)
class LoopsParallelizePass(ModulePass):
    """Marks the nests with at least `min_work` iterations for OpenMP (`gradfuse.omp`),
    sharing the fewest outer dims that make `chunks` iterations.

    `ir-opt k.mlir -p 'loops-parallelize{min-work=1048576 chunks=64}'`
    """

    name = "loops-parallelize"

    min_work: int = PARALLEL_WORK
    chunks: int = CHUNKS

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in fn.body.block.ops:
                if isinstance(nest, scf.ParallelOp):
                    nest.attributes.pop(OMP, None)
                    if trips(nest, points=True) * work(nest.body.block) >= self.min_work:
                        dims = shared_dims(nest, self.chunks)
                        nest.attributes[OMP] = IntegerAttr(dims, i64)
