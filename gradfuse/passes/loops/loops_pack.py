"""`loops-pack`: operands copied into the order their reduction reads them, for lanes.

After `loops-interchange` a convolution nest runs its output channels `co` innermost,
the dim its output is stored along, but it reads its weight `w[ci, co, kh, kw]` with
`co` strided: no vector load can read 8 channels. As the packing of GEMM and
convolution libraries (BLIS, oneDNN's weight reorders, TVM's `kernel_pack`), this
pass copies such an operand, once per call of the kernel function, into a scratch
buffer whose dims are in the order of the loops that index them, the nest's innermost
dim last: `p[kh, kw, ci, co]`. The reduction then reads `p` contiguously along the
lanes and along its innermost loop.

An operand is packed where a load in a nest's innermost reduction loop
- reads a buffer the kernel function receives, each index a loop index of the nest
  (the nest's innermost dim one of them, not the last), or index arithmetic on them
  (a phase-split weight `w[ci, co, 2 * t + 1 - r, ...]`, `kernel-split-phases`; the
  copy is then a gather over those loops, `p[r, t, ..., ci, co]`, and no larger than
  the operand). A guarded read, `select(g, w[..], 0)` with g computed from the same
  loops (a 3 x 3 window split into 2 x 2 taps a phase, the 4th past the window), is
  copied with its guard: the copy holds 0 where g fails, at most `GUARDED_GROWTH`
  times the operand. Where g is the same at every step of the reduction loop and in
  every lane (a test of the tap and the phase), the reduction reads the copy with g
  still: a test that `loops-skip-dead-sums` takes out of the loop, which then runs at
  the live taps only (7 of a 3 x 3 window's 16 phase-split taps are dead); else it
  reads it without a test; and
- is read again by at least `min-reuse` points of the nest (the points of the dims it
  does not depend on), so the copy costs little beside the reads it serves;
and where lanes could then run along the innermost dim: every other read there is
either contiguous along it or does not depend on it, and every store is contiguous.

Where the nest's innermost dim has several tiles of `TILE` points, the nest runs the
tiles outermost and the copy is tile-major, `p[co / 16, kh, kw, ci, co % 16]`: all that
one tile's points read is one contiguous block. `tile` sets the tile of a nest whose
innermost reduction loop runs at least `LONG_REDUCTION` steps: 32 where vectors hold 16
lanes (the c backend's `pack-tile`), so that `loops-unroll-jam` blocks 2 vectors a row
there too (8 x 2 sums, 2 loads and 8 broadcasts a step, where 8 x 1 took 1 load per
FMA). A nest of short reductions keeps tiles of at most `TILE`.

```
// ir-opt conv.mlir -p loops-pack
%p = memref.alloc() : memref<16x4x4x512x16xf32>
...
scf.parallel (%t, %i0, %i2, %i3, %l) = (%c0, ...) to (%c16, %c512, %c4, %c4, %c16) ... {
  %i1 = arith.addi (arith.muli %t, %c16), %l : index       // co, in tiles of 16
  %v = memref.load %w[%i0, %i1, %i2, %i3] : memref<512x256x4x4xf32>
  memref.store %v, %p[%t, %i2, %i3, %i0, %l] : memref<16x4x4x512x16xf32>
}
scf.parallel (%t, %d0, %d2, %d3, %q) = ... {
  ... memref.load %p[%t, %d5, %d6, %d4, %q] ...
}
memref.dealloc %p : memref<16x4x4x512x16xf32>
```

The copy iterates in the order of the buffer it reads (contiguous reads), but for
the dim that becomes the copy's last: its points run innermost in tiles of `TILE` (a
blocked transpose, each step a whole line of the copy; DCGAN b8's kernels took 597
against 552 ms warm, one thread, on the 2-core developer machine). The C backend
gives the scratch buffer static storage (`loop_render`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    depends,
    dim_trips,
    erase_dead,
    guarded_select,
    inside,
    int_constant,
    kernel_functions,
    own_index,
    replace_nest,
    scratch,
)
from gradfuse.passes.loops.loops_vectorize import contiguous, innermost_nests, innermost_reduction
from gradfuse.passes.loops.pack_copy import (
    TILE,
    copy_nest,
    gather_nest,
    iv_trips,
    major_indices,
    major_shape,
    tile_point,
)

GUARDED_GROWTH = 2
"""How much larger than its operand the copy of a guarded read may be: a 3 x 3 window
split into phases of 2 x 2 taps (`kernel-split-phases`) is copied as 16 taps for 9."""

LONG_REDUCTION = 64
"""Steps of a nest's innermost reduction loop from which `tile` applies. DCGAN b8 on a
2-core Emerald Rapids (16 lanes, one thread, kernels timed one by one by
`gradfuse.profiler`, the best of 2 runs each, taking turns): with 32 everywhere the
convolutions over 128-512 input channels took 15-30% less, but the weight gradients,
whose innermost loop runs over the 8 images, up to twice as long (g139 11.7 -> 22.7 ms,
g207 23.7 -> 35.9 ms); with 32 from 64 steps on, the kernels' sum went 295 -> 275 ms a
step (ResNet-18 b8 64x64: 142 -> 138 ms), no kernel losing more than the noise between
runs."""

MIN_REUSE = 8
"""Points of a nest that read each packed element, below which an operand is not
packed: the copy reads and writes each element once, the nest reads it this often."""


def loop_indices(nest: scf.ParallelOp, loop: scf.ForOp) -> list[SSAValue]:
    """The indices of the loops around `loop`'s body, outermost first: the nest's dims
    except its innermost, the `scf.for`s from `nest` to `loop`, then the innermost dim."""
    dims = list(nest.body.block.args)
    fors: list[SSAValue] = []
    op: Operation | None = loop
    while op is not None and op is not nest:
        if isinstance(op, scf.ForOp):
            fors.insert(0, op.body.block.args[0])
        op = op.parent_op()
    return [*dims[:-1], *fors, dims[-1]]


def lanes_along(loop: scf.ForOp, nest: scf.ParallelOp, packed: memref.LoadOp) -> bool:
    """Whether every read in `loop` but `packed` is contiguous along the nest's innermost
    dim or does not depend on it (what the nest reads and writes outside `loop`, once a
    point, lanes may gather and scatter), and nothing in the nest adds atomically."""
    d = nest.body.block.args[-1]
    for op in nest.walk():
        if isinstance(op, memref.LoadOp) and op is not packed and loop.is_ancestor(op):
            idx = list(op.indices)
            if any(depends(i, d) for i in idx) and own_index(idx, d) != len(idx) - 1:
                return False
        if isinstance(op, memref.AtomicRMWOp):
            return False
    return True


def pack_order(load: memref.LoadOp, order: list[SSAValue]) -> list[int] | None:
    """The load's index positions in the order of `order` (the loops' indices), if each
    index is one of them and the innermost dim (`order[-1]`) is one but not the last."""
    idx = list(load.indices)
    if len(set(idx)) != len(idx) or any(i not in order for i in idx):
        return None
    d = order[-1]
    if d not in idx or idx[-1] is d:
        return None
    return sorted(range(len(idx)), key=lambda k: order.index(idx[k]))


def reuse(nest: scf.ParallelOp, load: memref.LoadOp) -> int:
    """The points of `nest` that read each element `load` reads."""
    out = 1
    for k, arg in enumerate(nest.body.block.args):
        if not any(depends(i, arg) for i in load.indices):
            out *= max(dim_trips(nest, k), 1)
    return out


def computed_from(v: SSAValue, order: list[SSAValue]) -> bool:
    """Whether `v` is index arithmetic on loop indices of `order` and constants."""
    if v in order:
        return True
    op = v.owner
    if not isinstance(op, Operation) or op.regions or op.dialect_name() != "arith":
        return False
    return all(computed_from(o, order) for o in op.operands)


def index_loops(
    load: memref.LoadOp, order: list[SSAValue], guard: arith.SelectOp | None = None
) -> list[SSAValue] | None:
    """The loop indices that `load`'s indices (and the `guard` of a guarded read) are
    computed from (index arithmetic, not each an index itself), in loop order, the
    innermost dim (`order[-1]`) among them; None where the load is not such a read or a
    loop's bounds are not constants."""
    idx = list(load.indices)
    read = idx + ([guard.cond] if guard is not None else [])
    if not all(computed_from(i, order) for i in read):
        return None
    used = [iv for iv in order if any(depends(i, iv) for i in read)]
    if order[-1] not in used or own_index(idx, order[-1]) == len(idx) - 1:
        return None
    trips = [iv_trips(iv) for iv in used]
    size = prod(load.memref.type.get_shape())  # type: ignore[attr-defined]
    if not all(trips) or prod(t or 0 for t in trips) > size * (GUARDED_GROWTH if guard else 1):
        return None  # (a copy larger than the operand: a window's im2col)
    return used


def tiles(nest: scf.ParallelOp, size: int) -> bool:
    """Whether `tile_outermost` splits `nest`'s innermost dim into tiles of `size`: it
    runs from 0 by 1 through a multiple of `size` points, more than one tile."""
    k = len(nest.body.block.args) - 1
    n = dim_trips(nest, k)
    if int_constant(nest.lowerBound[k]) != 0 or int_constant(nest.step[k]) != 1:
        return False
    return n > size and n % size == 0


def tile_outermost(nest: scf.ParallelOp, size: int) -> scf.ParallelOp:
    """Splits the innermost dim `d` of `nest` into tiles of `size` (where `tiles`):
    the tiles `t` become the outermost dim, the points of a tile (`p`) stay innermost,
    and the body reads `t * size + p`. The new nest."""
    k = len(nest.body.block.args) - 1
    n = dim_trips(nest, k)
    old = nest.body.block
    new_block = Block(arg_types=[fast.INDEX] * (k + 2))
    tile, point = new_block.args[0], new_block.args[-1]
    tile.name_hint = old.args[k].name_hint
    for a, b in zip(old.args[:k], new_block.args[1:-1]):
        b.name_hint = a.name_hint
        a.replace_all_uses_with(b)
    width, count = fast.constant(size), fast.constant(n // size)
    index = tile_point(tile, point, width.results[0])
    new_block.add_ops(index)
    old.args[k].replace_all_uses_with(index[-1].results[0])
    for o in list(old.ops):
        o.detach()
        new_block.add_op(o)
    lbs, ubs, steps = (list(v) for v in (nest.lowerBound, nest.upperBound, nest.step))
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_ops_before([width, count], nest)
    return replace_nest(nest, new_block, (
        [lbs[k], *lbs[:k], lbs[k]], [count.result, *ubs[:k], width.result],
        [steps[k], *steps[:k], steps[k]],
    ))  # fmt: skip


def tile_major(loads: list[memref.LoadOp], nest: scf.ParallelOp) -> None:
    """Reads of tile-major copies in `nest` (just tiled by `tile_outermost`), each
    `p[..., t * TILE + q]`, become `p[t, ..., q]`: a tile's rows of the copy, all the
    reduction reads for its points, are one contiguous block (a 16-channel panel of a
    convolution's weight, read from start to end by each output point), where rows of
    the whole dim (`p[kh, kw, ci, co]`) would put the panel's lines a row apart (DCGAN
    b8's [8, 512, 4, 4] convolution: 8.2 -> 6.2 ms, one thread)."""
    tile, point = nest.body.block.args[0], nest.body.block.args[-1]
    for load in loads:
        Rewriter.replace_op(
            load, fast.load(load.memref, major_indices(list(load.indices), tile, point))
        )


def tile_of(loop: scf.ForOp, tile: int) -> int:
    """The tile of a nest whose innermost reduction is `loop`: `tile` if the loop runs
    at least `LONG_REDUCTION` steps, else at most `TILE`."""
    steps = iv_trips(loop.body.block.args[0])
    return tile if steps is not None and steps >= LONG_REDUCTION else min(tile, TILE)


def pack(
    fn: func.FuncOp, nest: scf.ParallelOp, min_reuse: int = MIN_REUSE, tile: int = TILE
) -> int:
    """Packs the operands of `nest` (in function `fn`) that qualify (see the module
    docstring), in tiles of `tile` points where its reduction is long; how many."""
    loop = innermost_reduction(nest)
    if loop is None or contiguous(loop):
        return 0  # none, or a dot product along the reduction (`loops-vectorize`)
    order = loop_indices(nest, loop)
    lanes = nest.body.block.args[-1]
    size = tile_of(loop, tile)
    tiled = tiles(nest, size)
    count, majors = 0, list[memref.LoadOp]()
    for load in [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]:
        buf = load.memref
        guard = guarded_select(load)
        perm = pack_order(load, order) if guard is None else None
        ivs = index_loops(load, order, guard) if perm is None else None
        if (
            (perm is None and ivs is None)
            or not isinstance(buf, BlockArgument)
            or buf.owner is not fn.body.block
            or reuse(nest, load) < min_reuse
            or not lanes_along(loop, nest, load)
        ):
            continue
        if perm is not None:
            shape = buf.type.get_shape()  # type: ignore[attr-defined]
            packed_shape, indices = [shape[k] for k in perm], [load.indices[k] for k in perm]
        else:
            assert ivs is not None
            packed_shape, indices = [iv_trips(iv) or 0 for iv in ivs], ivs
        major = tiled and packed_shape[-1] % size == 0
        if major:
            packed_shape = major_shape(packed_shape, size)
        target = scratch(fn, buf.type.element_type, packed_shape, "packed")  # type: ignore[attr-defined]
        copy, consts = (
            copy_nest(buf, target, perm, major, size) if perm is not None
            else gather_nest(load, target, indices, major, guard, size)
        )  # fmt: skip
        parent = nest.parent_block()
        assert parent is not None
        parent.insert_ops_before([*consts, copy], nest)
        new = fast.load(target, indices)
        if guard is None:
            Rewriter.replace_op(load, new)
        elif not inside(guard.cond, loop) and not depends(guard.cond, lanes):  # a tap's test
            old = list(load.indices)
            Rewriter.replace_op(load, new)
            erase_dead(old)
        else:  # the copy holds the guarded value: the guard and the clamped read go
            old = [*load.indices, guard.cond]
            Rewriter.replace_op(guard, new)
            Rewriter.erase_op(load)
            erase_dead(old)
        count += 1
        if major:
            majors.append(new)
    if count and tiled:
        tile_major(majors, tile_outermost(nest, size))
    return count


@dataclass(frozen=True)
class LoopsPackPass(ModulePass):
    """Copies operands that reductions read across their lanes into loop order.

    `ir-opt k.mlir -p 'loops-pack{min-reuse=8 tile=32}'`
    """

    name = "loops-pack"

    min_reuse: int = MIN_REUSE
    tile: int = TILE

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                pack(fn, nest, self.min_reuse, self.tile)
