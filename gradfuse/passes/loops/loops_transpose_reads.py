"""`loops-transpose-reads`: a copy that gathers its lanes across a block of memory reads
the block whole and transposes it in registers.

`loops-pack` copies a convolution's weight in the order its reduction reads it; an
input gradient's lanes run along the weight's input channels, K = kh x kw elements
apart (`w[co, ci, kh, kw]`, 9 apart for 3 x 3), so each vector of 16 lanes is a
gather of 16 scalars, and ResNet-18's 512 x 512 x 3 x 3 copies took 3-4 ms a call, 90%
of their kernels (Sapphire Rapids, one thread). The 16 lanes of all K points of the
trailing dims are 16 x K contiguous floats: K vector loads, and each point's vector is
built from them by two-source shuffles (one per further vector that holds some of its
lanes: `vpermt2ps` on AVX-512), then stored as before. The new nest runs the target's
tiles outermost, so that `loops-pack-tiles` makes the copy tile by tile in the nest
that reads it: a 9 MiB copy made whole is bound by memory, and the shuffles alone
changed nothing; together, ResNet-18 b8's layer4 input gradients took 2.2-2.4 ms a call
against 3.2-4.2 ms, its step 102.9 ms against 110-111 (one thread). As `loops-transpose-writes`
stores 8 x 8 tiles, this pass takes vectors of 16 lanes only: what runs on machines
whose lanes are 8 (`gradfuse.backend.c.lanes`) is left as it was.

```
// ir-opt k.mlir -p loops-transpose-reads
scf.parallel (%co, %t, %kh, %kw, %q) = ... to (%c512, %c32, %c3, %c3, %c16) step (..., %c16) {
  %v = vector.transfer_read %w[%co, %ci, %kh, %kw] ... (d0, d1, d2, d3) -> (d1) ... vector<16xf32>
  vector.store %v, %p[%t, %kh, %kw, %co, %q] : memref<32x3x3x512x16xf32>, vector<16xf32>
// becomes
%f = memref.collapse_shape %w [[0], [1, 2, 3]] : memref<512x512x3x3xf32> into memref<512x4608xf32>
scf.parallel (%t, %co, %q) = ... to (%c32, %c512, %c16) step (..., %c16) {
  %r0 = vector.load %f[%co, %b] : memref<512x4608xf32>, vector<16xf32>   // %b = %ci * 9
  ...  // %r1 .. %r8 at %b + 16 .. %b + 128
  // tap (0, 0): lane l is element 9 l of the block, lanes 0-1 in %r0, 2-3 in %r1, ...
  %s0 = vector.shuffle %r0, %r1 [0, 9, 18, 27, 4, 5, ..., 15] ...
  %s1 = vector.shuffle %s0, %r2 [0, 1, 2, 3, 20, 29, 6, ..., 15] ...
  ...  // 8 shuffles a tap, 72 in all
  vector.store %s7, %p[%t, %c0, %c0, %co, %q] ...
```
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf, vector
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    VectorType,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    block_like,
    depends,
    int_constant,
    kernel_functions,
    replace_nest,
    transfer_dim,
)
from gradfuse.passes.loops.loops_vectorize import innermost_nests
from gradfuse.passes.loops.pack_copy import clone_indices

LANES = 16
"""The lanes of the vectors this pass transposes (see the module docstring), and the
bound on the points of the trailing dims: 4 x 4 taps would take 15 shuffles a tap, 240 a
block, and DCGAN b8's step (its 4 x 4 input gradients) ran no faster so (209 ms either
way), its compile longer."""


@dataclass(frozen=True)
class Copy:
    """A nest that copies one gathered vector: its read, its store, and the nest's
    indices of the read's trailing dims (one each, over the whole dim)."""

    read: vector.TransferReadOp
    store: vector.StoreOp
    trailing: list[SSAValue]


def match(nest: scf.ParallelOp) -> Copy | None:
    """The copy `nest` makes, where it reads a vector of `LANES` lanes along a dim `a`
    whose later dims each run over one of the nest's indices, whole (so that the lanes
    of all their points are one contiguous block), and stores it; else None."""
    body = nest.body.block
    ops = [o for o in body.ops if not isinstance(o, scf.ReduceOp)]
    reads = [o for o in ops if isinstance(o, vector.TransferReadOp)]
    stores = [o for o in ops if isinstance(o, vector.StoreOp)]
    rest = [o for o in ops if o not in reads and o not in stores]
    if len(reads) != 1 or len(stores) != 1 or len(rest) + 2 != len(ops):
        return None
    if any(type(o).__module__ != arith.__name__ for o in rest):
        return None
    read, store = reads[0], stores[0]
    ty = read.result.type
    if store.vector is not read.result or ty != VectorType(ty.element_type, [LANES]):  # type: ignore[attr-defined]
        return None
    a = transfer_dim(read)
    shape = read.source.type.get_shape()  # type: ignore[attr-defined]
    trailing = list(read.indices[a + 1 :])
    args = list(body.args)
    if not trailing or not 2 <= prod(shape[a + 1 :]) < LANES or len(set(trailing)) < len(trailing):
        return None
    for iv, size in zip(trailing, shape[a + 1 :]):
        if iv not in args:
            return None
        k = args.index(iv)
        bounds = (nest.lowerBound[k], nest.upperBound[k], nest.step[k])
        if tuple(int_constant(v) for v in bounds) != (0, size, 1):
            return None
    if any(depends(i, iv) for i in read.indices[: a + 1] for iv in trailing):
        return None
    return Copy(read, store, trailing)


def masks(count: int) -> list[tuple[int, list[tuple[int, list[int]]]]]:
    """For each of the `count` points of the trailing dims, how its vector is built from
    the `count` loaded vectors (lane l of point t is element l x count + t of the
    block): the first vector it takes lanes from, and the shuffles that follow, each
    (vector, mask) with lanes 0..15 from the result so far (the first vector, for the
    first shuffle) and 16..31 from that vector; a lane not yet placed keeps its own."""
    out = []
    for t in range(count):
        where = [divmod(lane * count + t, LANES) for lane in range(LANES)]
        rows = sorted({r for r, _ in where})
        steps = []
        for row in rows[1:]:
            mask = [
                LANES + at if r == row else at if not steps and r == rows[0] else lane
                for lane, (r, at) in enumerate(where)
            ]
            steps.append((row, mask))
        out.append((rows[0], steps))
    return out


def transpose(copy: Copy, nest: scf.ParallelOp) -> None:
    """Replaces `nest` by a nest over its other indices that loads the block, shuffles
    it and stores each point's vector (see the module docstring)."""
    read, store, trailing = copy.read, copy.store, copy.trailing
    body = nest.body.block
    source = read.source
    ty = source.type
    assert isinstance(ty, MemRefType)
    shape = list(ty.get_shape())
    a = transfer_dim(read)
    count = prod(shape[a + 1 :])
    flat_type = MemRefType(ty.element_type, [*shape[:a], shape[a] * count])
    groups = [[k] for k in range(a)] + [list(range(a, len(shape)))]
    flat = memref.CollapseShapeOp.create(
        operands=[source],
        result_types=[flat_type],
        properties={
            "reassociation": ArrayAttr(
                [ArrayAttr([IntegerAttr(k, i64) for k in g]) for g in groups]
            )
        },
    )
    keep = [k for k, arg in enumerate(body.args) if arg not in trailing]
    tile = store.indices[0]  # the target's tile: outermost, for `loops-pack-tiles`
    keep.sort(key=lambda k: body.args[k] is not tile)
    new_body = block_like([body.args[k] for k in keep])
    at: dict[SSAValue, SSAValue] = {body.args[k]: new for k, new in zip(keep, new_body.args)}
    ops: list[Operation] = []

    def value(v: SSAValue, point: dict[SSAValue, SSAValue]) -> SSAValue:
        """`v` in the new body, with the trailing indices at `point`."""
        return clone_indices([v], point, ops, within=body)[0]

    zero = fast.constant(0)
    ops.append(zero)
    origin = {**at, **{iv: zero.result for iv in trailing}}
    lead = [value(i, origin) for i in read.indices[:a]]
    width = fast.constant(count)
    start = fast.index_op(arith.MuliOp, value(read.indices[a], origin), width.results[0])
    ops += [width, start]
    shared = {v: new for v, new in origin.items() if not any(depends(v, iv) for iv in trailing)}
    vec_type = read.result.type
    rows = []
    for m in range(count):
        at_m = start.results[0]
        if m:
            offset = fast.constant(m * LANES)
            moved = fast.index_op(arith.AddiOp, at_m, offset.results[0])
            ops += [offset, moved]
            at_m = moved.results[0]
        load = vector.LoadOp(flat.result, [*lead, at_m], vec_type)  # type: ignore[arg-type]
        ops.append(load)
        rows.append(load.result)
    for (first, steps), coords in zip(masks(count), product(*map(range, shape[a + 1 :]))):
        part = rows[first]
        for row, mask in steps:
            lanes = DenseArrayBase.from_list(i64, mask)
            shuffle = vector.ShuffleOp(part, rows[row], lanes, result_type=vec_type)  # type: ignore[arg-type]
            ops.append(shuffle)
            part = shuffle.result
        point = dict(shared)  # what the read computed apart from the taps: once
        for iv, c in zip(trailing, coords):
            k = fast.constant(c)
            ops.append(k)
            point[iv] = k.results[0]
        indices = [value(i, point) for i in store.indices]
        ops.append(vector.StoreOp(part, store.base, indices))
    if not zero.result.uses:  # (the trailing indices took part in no other index)
        ops.remove(zero)
    new_body.add_ops([*ops, scf.ReduceOp()])
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_op_before(flat, nest)
    lower, upper, steps = (
        [list(vs)[k] for k in keep] for vs in (nest.lowerBound, nest.upperBound, nest.step)
    )
    replace_nest(nest, new_body, (lower, upper, steps))


@dataclass(frozen=True)
class LoopsTransposeReadsPass(ModulePass):
    """Copies whose 16 lanes gather across a contiguous block load it whole and shuffle.

    `ir-opt k.mlir -p loops-transpose-reads`
    """

    name = "loops-transpose-reads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                found = match(nest)
                if found is not None:
                    transpose(found, nest)
