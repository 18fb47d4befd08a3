"""Reductions a whole GPU block computes together (the `cuda` pipeline).

A kernel that reduces many values into few (a batch norm's statistics over N x H x W
per channel, a bias gradient over the batch) gets one thread per output from the
plain lowering: a serial loop of thousands of steps while the GPU idles. In the
`cuda` pipeline, `kernel-block-reduce` marks such row-by-row runs (and wraps such single
kernels into a run of one over their outputs) with `gradfuse.block_reduce`; then
each phase of a row with one output reduces cooperatively: the block's threads
stride over the reduction, each keeping a partial result, which a tree over
workgroup memory combines, a barrier per level; thread 0 runs the epilogue:

```
scf.for %it = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {   // 2048 / 256
  %kk = %it * 256 + %tid     ... the prologue at reduction index %kk ...
}
memref.store %acc, %partial[%tid] : memref<256xf32, 3 : i64>
gpu.barrier
scf.if (%tid < 128) { %partial[%tid] = %partial[%tid] + %partial[%tid + 128] }
gpu.barrier
...                                                              // 64, 32, ..., 1
scf.if (%tid == 0) { ... the epilogue with %partial[0] ... }
```
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, gpu
from xdsl.ir import SSAValue

from gradfuse.dialects import kernel as kd
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.lib.kernel_lowering import combine

if TYPE_CHECKING:
    from gradfuse.passes.lib.rows_lowering import RowsBuilder

BLOCK_REDUCE_ATTR = "gradfuse.block_reduce"
THREADS = 256
MIN_REDUCTION = 256
"""A phase reduces cooperatively when its reduction is at least this long."""


def cooperative(k: kd.KernelOp, rows: int) -> bool:
    """Whether the phase of `k` in a run over `rows` row dims is one output per row with a
    reduction long enough to share among a block."""
    sizes, npar = k.domain_sizes, k.num_parallel
    return npar == rows and npar < len(sizes) and prod(sizes[npar:]) >= MIN_REDUCTION


def lower_cooperative(
    b: RowsBuilder,
    k: kd.KernelOp,
    row: list[SSAValue],
    tid: SSAValue,
    args: dict[SSAValue, SSAValue],
) -> None:
    """Kernel `k` (one output per row) with the block's `THREADS` threads sharing its
    reduction (see the module docstring)."""
    loc = k.location
    sizes, npar = k.domain_sizes, k.num_parallel
    red, total = sizes[npar:], prod(sizes[npar:])
    prologue, reds, epilogue = k.phases()
    inits = [b._init(r) for r in reds]
    with b.counted_loop(-(-total // THREADS), inits, loc) as (body, loop):
        base = b.add(fast.index_op(arith.MuliOp, body.args[0], b.const(THREADS), flags=True), loc)
        kk = b.add(fast.index_op(arith.AddiOp, base, tid, flags=True), loc)
        valid = b.add(fast.cmpi(kk, b.const(total), "ult"), loc)
        clamped = b.add(fast.select(valid, kk, b.const(total - 1)), loc)
        vm: dict[SSAValue, SSAValue] = {a: args[a] for a in k.buffer_args}
        vm.update(zip(k.body.block.args[:npar], row))
        point = [*row, *b.delinearize(clamped, red, loc)]
        vm.update(zip(k.body.block.args[npar : len(sizes)], point[npar:]))
        for op in prologue:
            if not isinstance(op, kd.StoreOp | kd.ScatterAddOp):
                b.lower_op(op, k, vm, point)
                continue
            with b.if_then(valid, op.location):  # past the end the point is clamped
                b.lower_op(op, k, vm, point)
        steps = []
        for r, acc in zip(reds, body.args[1:]):
            step = b.add(combine(r.kind.data, acc, vm[r.value]), r.location)
            steps.append(b.add(fast.select(valid, step, acc), r.location))
        b.add(fast.scf_yield(*steps))
    partials = []
    for r, acc in zip(reds, loop.results):
        alloca = fast.workgroup_alloca(acc.type, [THREADS])
        alloca.location = r.location
        b.hoist(alloca)
        partials.append((r, alloca.memref))
        b.add(fast.store(acc, alloca.memref, [tid]), loc)
    half = THREADS // 2
    while half:
        b.add(gpu.BarrierOp(), loc)
        with b.if_then(b.add(fast.cmpi(tid, b.const(half), "ult"), loc), loc):
            other = b.add(fast.index_op(arith.AddiOp, tid, b.const(half), flags=True), loc)
            for r, partial in partials:
                mine = b.add(fast.load(partial, [tid]), loc)
                theirs = b.add(fast.load(partial, [other]), loc)
                total = b.add(combine(r.kind.data, mine, theirs), loc)
                b.add(fast.store(total, partial, [tid]), loc)
        half //= 2
    b.add(gpu.BarrierOp(), loc)
    with b.if_then(b.add(fast.cmpi(tid, b.const(0), "eq"), loc), loc):
        at_end: dict[SSAValue, SSAValue] = {a: args[a] for a in k.buffer_args}
        at_end.update(zip(k.body.block.args[:npar], row))
        for r, partial in partials:
            at_end[r.result] = b.add(fast.load(partial, [b.const(0)]), loc)
        for op in epilogue:
            b.lower_op(op, k, at_end, row)
