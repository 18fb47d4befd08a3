"""`loops-unroll-jam`: register blocks for the nests that run a reduction.

A nest whose points each run a reduction loop (a contraction: x @ w, a weight gradient,
a dot product per row) does one chain of dependent adds per point, and reads both
operands again for every point. Jamming a dim (`jam.py`) runs several points side by
side in one reduction loop: independent chains of adds, and one read of an operand that
does not depend on that dim for all of them. This pass chooses the dims, as TVM's CPU
schedules (`split` + `unroll` of the output tile) and MLIR's `affine-loop-unroll-jam`:
- the parallel dim that the most reads of the reduction do not depend on (a vector read
  counting twice; the innermost of equals): the rows of x @ w, the outputs of a
  matrix-vector product, by up to `rows`; where it has fewer points (a 4 x 4 image's
  4 columns), the next dims that share as many reads too, up to `fill` rows in all
  (`rows` unless set), each by a factor that divides its points (4 columns x 2 rows of
  the image; DCGAN's [8, 512, 4, 4] convolutions 26 -> 21 ms); a dim that no such
  factor fits is passed over for the next (a 3 x 3 window's 3 rows are not filled to
  2 x 3, whose remainder nest made ResNet-18's weight gradients 58 -> 85 ms: its taps
  take 3 x 2 input channels instead, and its layer 1 to 4 weight gradients each 1.9 ->
  1.4 ms to 3.4 -> 2.9 ms, against 3 taps alone). With 16 registers (`rows=4 fill=6`)
  the 3 taps take 2 channels too: 12 sums where 3 rows left 6, too few chains of FMAs
  to hide their latency (a Zen 3's 2 units x 4 cycles);
- in a nest whose innermost dim runs in vector lanes (`loops-vectorize`), that dim too,
  by 2 where a row dim was jammed (an 8 x 16 block: 16 vector sums), else by up to `rows`.
A dim runs its last `N mod factor` points in a nest of their own, jammed by their
count where they are 2 or more, and by the dims after (the stem of ResNet-18: a 7 x 7
window's last 3 taps after 4 ran one at a time, 2 sums each over 8,192 steps, 3.7% of
the b8 step; jammed, the step 123.5 -> 117.4 ms, one thread, Zen 3, best of 5 runs
taken alternately). A nest that adds atomically, or
whose innermost dim `omp simd` vectorises, is left as it is. A dim that a loop's bounds
depend on (the output point whose taps `loops-trim-taps` bounded) is not jammed: its
points run different taps.

```
// ir-opt mm.mlir -p loops-unroll-jam
scf.parallel (%d0, %d1) = ... step (%c1, %c8) { %s = scf.for %d2 ... -> (vector<8xf32>)
// becomes
scf.parallel (%d0, %d1) = (%c0, %c0) to (%c64, %c128) step (%c4, %c16) {
  %s:8 = scf.for %d2 ... -> (vector<8xf32>, ...)
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import memref, scf, vector
from xdsl.dialects.builtin import ModuleOp, VectorType
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.loops.jam import READS, unroll_jam
from gradfuse.passes.loops.loop_ir import SIMD, depends, dim_trips, kernel_functions
from gradfuse.passes.loops.loops_parallelize import trips as iterations
from gradfuse.passes.loops.loops_parallelize import work
from gradfuse.passes.loops.loops_vectorize import innermost_nests, innermost_reduction

ROWS = 8
"""Points jammed along a row dim: with 2 vectors of lanes, 16 sums, 2 loads and a
broadcast per step of the reduction. AVX-512's 32 registers hold them; measured on the
2-core AVX-512 developer machine (DCGAN b8's kernels, one thread, gcc 12), 8 rows took
617 ms against 687 ms for 4 with `-march=native`. With 16 registers (AVX2) the sums
spill: on a Zen 3, 4 rows took DCGAN b8's step from 541-569 to 437-450 ms. The c
backend sets `rows` for its target (`jam-rows`, `gradfuse.backend.c.lanes.host_rows`);
this default keeps `ir-opt -p cpu`'s output the same on every machine."""

JAM_WORK = 1 << 20
"""The default `min-work`: a nest of fewer points x inner iterations (as
`loops-parallelize` counts them) stays unjammed, its register block not worth its code.
DCGAN b8's three such nests (the 4 x 4 convolutions onto a 1 x 1 image and back, 197K
iterations) ran in 0.16, 0.12 and 0.09 ms a step unjammed against 0.31, 0.27 and 0.20
jammed, and took gcc 0.1 s each against 0.4-0.5 s (1.4 s of the program's 14.8 s); at
2^24 the next six (6.7M-11M) cost 10 ms a step more (one of them 2.2 -> 10.4 ms).
Kernels timed one by one (`gradfuse.profiler`, best of 6 steps), one thread, on the
2-core developer machine."""


MANY_POINTS = 2048
"""Points of a nest that jams from 1 / `SMALL_WORK` of `min-work` on: many points each
running a short reduction (a transformer layer's 64-long dot products, 2,048-6,144 of
them: its projections, attention and feed-forward) spend their time on each point's
setup and horizontal sum, which a register block shares; a nest of few points with long
reductions (a batch norm's 128-512 channel sums of 8 x H x W terms) gains nothing worth
its code. The transformer layer of benchmarks/transformer.py, one thread, 2-core Zen 4:
0.38 -> 0.19 ms a step (1.9x -> 3.4-4.0x PyTorch eager), its QKV projection 56 -> 37
us; DCGAN b8's C grows by 0.4% (two small weight-gradient nests), ResNet-18's
by 1.3%."""
SMALL_WORK = 64


def plan(
    nest: scf.ParallelOp, rows: int = ROWS, min_work: int = JAM_WORK, fill: int = 0
) -> list[tuple[int, int]]:
    """The dims of `nest` to jam, each with its factor, in the order to jam them (a
    block that a short first dim leaves filled up to `fill` rows, else `rows`)."""
    if any(isinstance(o, memref.AtomicRMWOp) for o in nest.walk()):
        return []
    points = iterations(nest, points=True)
    total = points * work(nest.body.block)
    if total < min_work and (
        points < MANY_POINTS or total * SMALL_WORK < min_work or trimmed(nest)
    ):
        return []
    loop = innermost_reduction(nest)
    if loop is None:
        return []
    args = nest.body.block.args
    last = len(args) - 1
    lanes = any(isinstance(r.type, VectorType) for r in loop.results)
    reads = [o for o in loop.body.walk() if isinstance(o, READS)]

    def shared(d: SSAValue) -> int:
        """How many reads one copy serves when `d` is jammed (a vector read counts 2)."""
        return sum(
            2 if isinstance(r, vector.LoadOp) else 1
            for r in reads
            if not any(depends(i, d) for i in r.operands[1:])
        )

    trips = [dim_trips(nest, k) for k in range(len(args))]
    bounding = loop_bounds(nest)
    scored = [
        (shared(args[k]), k)
        for k in range(len(args))
        if (k < last or not (lanes or SIMD in nest.attributes))
        and trips[k] >= 2
        and not any(depends(b, args[k]) for b in bounding)  # (a tap's bounds: loops-trim-taps)
    ]
    chosen: list[tuple[int, int]] = []
    score, best = max(scored, default=(0, 0))  # the most shared reads, then the innermost
    if score:
        block = 1  # rows so far: a short row dim (a 4 x 4 image's 4) takes the next too
        for s, k in sorted(scored, reverse=True):
            most = (fill or rows) if chosen else rows
            if s < score or block * 2 > most:
                break
            factor = min(most // block, trips[k])
            if chosen:  # a filling dim jams by a divisor: no remainder nest for a few rows
                factor = max(f for f in range(1, factor + 1) if trips[k] % f == 0)
            if factor < 2:
                continue
            chosen.append((k, factor))
            block *= factor
    if lanes and (not chosen or best != last) and trips[last] >= 2:
        chosen.append((last, min(2 if chosen else rows, trips[last])))
    return chosen


def loop_bounds(nest: scf.ParallelOp) -> list[SSAValue]:
    """The bounds of the loops in `nest`."""
    return [b for o in nest.walk() if isinstance(o, scf.ForOp) for b in (o.lb, o.ub)]


def trimmed(nest: scf.ParallelOp) -> bool:
    """Whether a loop in `nest` has bounds that depend on its point (`loops-trim-taps`:
    a window on a small image, whose blocks of few points run faster unjammed)."""
    return any(depends(b, a) for b in loop_bounds(nest) for a in nest.body.block.args)


def jam_nest(
    nest: scf.ParallelOp, rows: int = ROWS, min_work: int = JAM_WORK, fill: int = 0
) -> None:
    """Jams the dims that `plan` chooses, each in the nest the last one left; a
    remainder of 2 points or more is jammed by its points, and by the dims after."""
    jam_dims(nest, plan(nest, rows, min_work, fill))


def jam_dims(nest: scf.ParallelOp, chosen: list[tuple[int, int]]) -> None:
    """Jams `nest`'s dims `chosen` (dim, factor) in turn, and each remainder nest of at
    least 2 points by its points (a 7-tap window's 3 after 4: 3 sums, not 1 x 3)."""
    for k, (dim, factor) in enumerate(chosen):
        rest = dim_trips(nest, dim) % factor
        main = unroll_jam(nest, dim, factor)
        if main is None:
            continue
        if rest >= 2:
            jam_dims(nest, [(dim, rest), *chosen[k + 1 :]])
        nest = main


@dataclass(frozen=True)
class LoopsUnrollJamPass(ModulePass):
    """Jams the points of reduction nests into register blocks of up to `rows` rows.

    `ir-opt k.mlir -p 'loops-unroll-jam{rows=4 fill=6}'`
    """

    name = "loops-unroll-jam"

    rows: int = ROWS
    min_work: int = JAM_WORK
    fill: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                jam_nest(nest, self.rows, self.min_work, self.fill)
