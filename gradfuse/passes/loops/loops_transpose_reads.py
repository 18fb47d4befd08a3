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
against 3.2-4.2 ms, its step 102.9 ms against 110-111 (one thread).

With lanes of 8 (`gradfuse.backend.c.lanes`: AVX2, Zen 4), a copy whose lanes gather
across channels (a forward convolution's weight, 8 output channels 16 x C apart; a
transposed one's split by phase, its taps read through `2 t - r + 1`) where each lane's
points of the last dims are a multiple of 8 and contiguous (4 x 4 taps: 16) loads each
lane's points as vectors and transposes 8 x 8 tiles (24 shuffles each, as
`loops-transpose-writes`); each value of the nest's indices that the taps' indices take
stores the vector of the point it reads. DCGAN b8 on a 2-core Zen 4, one thread,
kernels timed alternately (`gradfuse.profiler`, best of 5): its 4 phase-split 512 x 256
copies' kernels 8.4-8.9 -> 5.9-6.4 ms a call, the step's kernels 244 -> 231 ms; its
steps 240 -> 227 ms (best of 5, alternately). Where no trailing dims hold a multiple of 8
points, all the dims after the lanes' take part if they hold 8 to 64: their whole tiles
are transposed and the points past them gathered as before (3 x 3 taps: 8 + 1; ResNet-18
b8's layer-4 input gradients, whose weight copies then run tile by tile in the nest
that reads them, `loops-pack-tiles`: 2.36 -> 1.70 and 2.32 -> 1.93 ms a call, the
layers before them unchanged, one thread, 2-core Zen 4, best of 2 x 5 profiled steps).

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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, scf, vector
from xdsl.dialects.builtin import (
    AffineMapAttr,
    DenseArrayBase,
    MemRefType,
    ModuleOp,
    VectorType,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.passes import ModulePass

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.lanes import IN_BOUNDS
from gradfuse.passes.loops.loop_ir import (
    affine_form,
    block_like,
    collapsed,
    depends,
    int_constant,
    kernel_functions,
    replace_nest,
    transfer_dim,
)
from gradfuse.passes.loops.loops_transpose_writes import transpose as tile_transpose
from gradfuse.passes.loops.loops_vectorize import innermost_nests
from gradfuse.passes.loops.pack_copy import clone_indices

LANES = 16
"""The lanes of the vectors this pass transposes (see the module docstring), and the
bound on the points of the trailing dims: 4 x 4 taps would take 15 shuffles a tap, 240 a
block, and DCGAN b8's step (its 4 x 4 input gradients) ran no faster so (209 ms either
way), its compile longer."""


EIGHT = 8
"""Lanes of the vectors transposed in 8 x 8 tiles (the 3 x 8 shuffles of
`loops-transpose-writes`): a lane's points, a multiple of 8, are contiguous."""
MAX_POINTS = 64
"""The most points of the trailing dims of a copy of 8 lanes (8 tiles, 192 shuffles)."""


@dataclass(frozen=True)
class Copy:
    """A nest that copies one gathered vector: its read, its store, the nest's indices
    that the read's trailing dims take, the read's last dim before those, and for each
    value of the indices the trailing point it reads (`tap_points`)."""

    read: vector.TransferReadOp
    store: vector.StoreOp
    trailing: list[SSAValue]
    last: int  # (16 lanes: the lanes' dim)
    points: list[tuple[tuple[int, ...], int]]


def match(nest: scf.ParallelOp) -> Copy | None:
    """The copy `nest` makes, where it reads a vector along a dim `a` and stores it, and
    the read's trailing dims each run over one of the nest's indices, whole: of 16
    lanes, the dims after `a`, fewer than 16 points (the lanes of all their points are
    one contiguous block); of 8 lanes, the fewest last dims whose points are a multiple
    of 8 (each lane's points are contiguous: 8 x 8 tiles, `EIGHT`), else all the dims
    after the lanes' (whole tiles, then single points gathered). Else None."""
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
    lanes = ty.get_shape()[0] if isinstance(ty, VectorType) and ty.get_num_dims() == 1 else 0
    if store.vector is not read.result or lanes not in (LANES, EIGHT):
        return None
    a = transfer_dim(read)
    shape = read.source.type.get_shape()  # type: ignore[attr-defined]
    last = a
    if lanes == EIGHT:  # the fewest trailing dims whose points are a multiple of 8
        last = len(shape) - 2
        while last > a and prod(shape[last + 1 :]) % EIGHT:
            last -= 1
    count = prod(shape[last + 1 :])
    if lanes == LANES:
        fits = 2 <= count < LANES
    else:  # whole tiles, and past them (3 x 3 taps: 9 = 8 + 1) points gathered as before
        fits = EIGHT <= count <= MAX_POINTS and (count % EIGHT == 0 or last == a)
    indices = read.indices[last + 1 :]
    if not fits or (lanes == LANES and not all(i in body.args for i in indices)):
        return None  # (of 16 lanes, each trailing dim's index a nest index)
    found = tap_points(indices, shape[last + 1 :], nest)
    if found is None:
        return None
    trailing, points = found
    if any(depends(i, iv) for i in read.indices[: last + 1] for iv in trailing):
        return None
    return Copy(read, store, trailing, last, points)


def tap_points(
    indices: Sequence[SSAValue], shape: Sequence[int], nest: scf.ParallelOp
) -> tuple[list[SSAValue], list[tuple[tuple[int, ...], int]]] | None:
    """The nest's indices that `indices` (of dims of `shape`) are affine forms of, and
    for each of their values (in `product` order) the point of `shape` it reads, where
    they read every point once (nest indices over whole dims; a phase-split weight's
    taps `2 t - r + 1`); else None."""
    forms = [affine_form(i) for i in indices]
    if any(f is None for f in forms):
        return None
    args = list(nest.body.block.args)
    ivs: list[SSAValue] = []
    for form in forms:
        ivs += [iv for iv in form[0] if iv not in ivs]  # type: ignore[index]
    sizes = []
    for iv in ivs:
        if iv not in args:
            return None
        j = args.index(iv)
        bounds = (nest.lowerBound[j], nest.upperBound[j], nest.step[j])
        lo, hi, step = (int_constant(v) for v in bounds)
        if lo != 0 or step != 1 or hi is None:
            return None
        sizes.append(hi)
    if prod(sizes) != prod(shape):
        return None
    points, seen = [], set()
    for values in product(*map(range, sizes)):
        at = dict(zip(ivs, values))
        coords = [f[1] + sum(k * at[iv] for iv, k in f[0].items()) for f in forms]  # type: ignore[index]
        if any(not 0 <= x < n for x, n in zip(coords, shape)) or tuple(coords) in seen:
            return None
        seen.add(tuple(coords))
        flat = 0
        for x, n in zip(coords, shape):
            flat = flat * n + x
        points.append((values, flat))
    return ivs, points


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
    a, last = transfer_dim(read), copy.last
    count = prod(shape[last + 1 :])
    eight = read.result.type.get_shape()[0] == EIGHT  # type: ignore[attr-defined]
    cut = last + 1 if eight else a  # the dims from `cut` on become one
    flat = collapsed(source, cut)
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
    shared = {v: new for v, new in origin.items() if not any(depends(v, iv) for iv in trailing)}
    vectors: list[SSAValue] | Iterator[SSAValue]
    if eight:
        lead = [value(i, origin) for i in read.indices[:cut]]
        vectors = tiles(flat.result, lead, a, count, ops)
        vectors += [gather(flat.result, read, lead, p, ops) for p in range(len(vectors), count)]
    else:  # each point's shuffles just before its store, the points in order
        lead = [value(i, origin) for i in read.indices[: a + 1]]
        vectors = gathered(flat.result, read, count, lead, ops)
    for values, tap in copy.points:
        part = vectors[tap] if isinstance(vectors, list) else next(vectors)
        point = dict(shared)  # what the read computed apart from the taps: once
        for iv, c in zip(trailing, values):
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


def gathered(
    flat: SSAValue,
    read: vector.TransferReadOp,
    count: int,
    indices: list[SSAValue],
    ops: list[Operation],
) -> Iterator[SSAValue]:
    """Each point's vector of 16 lanes, in order: the block (lane l's points at `count`
    x l of the flat dim) loaded as `count` vectors, each point's lanes gathered from
    them by two-source shuffles (`masks`), added to `ops` as the point is asked for.
    `indices`: the read's up to its lanes' dim."""
    width = fast.constant(count)
    start = fast.index_op(arith.MuliOp, indices[-1], width.results[0])
    ops += [width, start]
    vec_type = read.result.type
    rows = []
    for m in range(count):
        at_m = start.results[0]
        if m:
            offset = fast.constant(m * LANES)
            moved = fast.index_op(arith.AddiOp, at_m, offset.results[0])
            ops += [offset, moved]
            at_m = moved.results[0]
        load = vector.LoadOp(flat, [*indices[:-1], at_m], vec_type)  # type: ignore[arg-type]
        ops.append(load)
        rows.append(load.result)
    for first, steps in masks(count):
        part = rows[first]
        for row, mask in steps:
            lanes = DenseArrayBase.from_list(i64, mask)
            shuffle = vector.ShuffleOp(part, rows[row], lanes, result_type=vec_type)  # type: ignore[arg-type]
            ops.append(shuffle)
            part = shuffle.result
        yield part


def tiles(
    flat: SSAValue, indices: list[SSAValue], a: int, count: int, ops: list[Operation]
) -> list[SSAValue]:
    """Each point's vector of 8 lanes: lane l's `count` points are contiguous, at
    `indices` with index `a` (the lanes' dim) + l; each 8 x 8 tile of lanes x points is
    loaded as 8 vectors (one a lane) and transposed (`loops-transpose-writes`)."""
    vec_type = VectorType(flat.type.element_type, [EIGHT])  # type: ignore[attr-defined]
    lane_at = [indices[a]]
    for lane in range(1, EIGHT):
        k = fast.constant(lane)
        add = fast.index_op(arith.AddiOp, indices[a], k.results[0])
        ops += [k, add]
        lane_at.append(add.results[0])
    points: list[SSAValue] = []
    for h in range(count // EIGHT):
        k = fast.constant(h * EIGHT)
        ops.append(k)
        rows = []
        for lane in range(EIGHT):
            where = [*indices[:a], lane_at[lane], *indices[a + 1 :], k.results[0]]
            load = vector.LoadOp(flat, where, vec_type)
            ops.append(load)
            rows.append(load.result)
        points += tile_transpose(rows, ops)
    return points


def gather(
    flat: SSAValue, read: vector.TransferReadOp, lead: list[SSAValue], p: int, ops: list[Operation]
) -> SSAValue:
    """Point `p` past the whole 8 x 8 tiles, its lanes gathered as `read` gathers them
    (one scalar a lane): a `vector.transfer_read` of `flat` at `lead` and `p`."""
    at, pad = fast.constant(p), fast.constant(0.0, read.result.type.element_type)  # type: ignore[attr-defined]
    along = AffineMapAttr(AffineMap(len(lead) + 1, 0, (AffineExpr.dimension(transfer_dim(read)),)))
    gathered = vector.TransferReadOp(
        flat, [*lead, at.result], pad, read.result.type, IN_BOUNDS, along
    )
    ops += [at, pad, gathered]
    return gathered.result


@dataclass(frozen=True)
class LoopsTransposeReadsPass(ModulePass):
    """Copies whose 16 lanes gather across a contiguous block load it whole and shuffle;
    those of 8 lanes whose lanes' points are contiguous transpose 8 x 8 tiles.

    `ir-opt k.mlir -p loops-transpose-reads`
    """

    name = "loops-transpose-reads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                found = match(nest)
                if found is not None:
                    transpose(found, nest)
