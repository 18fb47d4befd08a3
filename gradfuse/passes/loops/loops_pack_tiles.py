"""`loops-pack-tiles`: a large copy made one block at a time, in the iteration of the
nest that reads the block, into a buffer private to that iteration.

`loops-pack` copies a convolution's weight whole, before the nest that reads it, tile
by tile (`p[co / 16, kh, kw, ci, co % 16]`), and the nest runs its tiles outermost. A
weight larger than a core's cache (ResNet-18's 512 x 512 x 3 x 3, 9 MiB) is then
written to memory by the copy and read back from memory by the nest. As BLIS packs one
panel of B at a time into a buffer that stays in cache, and as MLIR's
`affine-loop-fusion` fuses a producer nest into its consumer with a private memref,
this pass moves the copy of tile t into iteration t of the reading nest: one tile
(16 x 4608 floats, 288 KiB) is copied and then read while it is in the core's L2, and
each thread reuses one tile's buffer. (ResNet-18 b8's 512-channel forward
convolutions, one thread on the 2-core developer machine: 7.2-7.9 -> 4.4-4.9 ms per
call of the two layers' row kernels.) A `loops-pad` copy of a nest that runs its
images outermost is moved the same way, image by image.

It moves a copy where a `memref.alloc`'s only accesses are the stores of one nest
and the loads of a later one, both `scf.parallel`s whose first dim runs over the
buffer's first dim (from 0 by 1) and is that index of every access: the copy reads
one block's source at a time and the nest keeps its order. A copy that runs its
blocks inside (an input gradient's weight copy, which reads the weight in its own
order) is left whole: one tile's copy would read across all of the weight (ResNet-18's
input gradients took 12-47% longer so, but for one, gathering lanes of 8 on Zen 4).
`loops-transpose-reads` runs such a copy tiles outermost where its lanes are 16 and it
loads them whole: it is then made tile by tile here. It also takes a whole copy of at least
`min-bytes`, one block of at most `max-bytes` (a stack array in C) and at least
`min-tiles` blocks, which are then all that the threads share; and nothing between
the two nests may write what the copy reads.

```
// ir-opt conv.mlir -p loops-pack-tiles
%p = memref.alloc() : memref<32x3x3x512x16xf32>
scf.parallel (%t, %i, ...) = (%c0, ...) to (%c32, ...) { memref.store %v, %p[%t, ...] }
scf.parallel (%u, %d0, ...) = (%c0, ...) to (%c32, ...) { ... memref.load %p[%u, ...] }
// becomes
scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
  %q = memref.alloca() : memref<1x3x3x512x16xf32>
  scf.parallel (%i, ...) = ... { memref.store %v, %q[%c0, ...] }
  scf.parallel (%d0, ...) = ... { ... memref.load %q[%c0, ...] }
}
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref, scf
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.kernel.plan_buffers import nbytes
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    LOADS,
    OMP,
    STORES,
    buffer_of,
    int_constant,
    kernel_functions,
)

MIN_BYTES = 1 << 21
"""The default `min-bytes`: a copy this large no longer stays in one core's L2 cache
(1 or 2 MiB on current x86 cores) until its nest reads it."""
MAX_BYTES = 1 << 20
"""The default `max-bytes`: the most one tile's buffer may take on a thread's stack."""
MIN_TILES = 8
"""The default `min-tiles`: after the fusion only the tiles are shared among threads."""


def first_index(op: Operation) -> int:
    """The operand position of the first index of a load or store."""
    return list(op.operands).index(buffer_of(op)) + 1


def tiled(nest: Operation, accesses: list[Operation], tiles: int) -> bool:
    """Whether `nest` is an `scf.parallel` of 2 dims or more whose first runs over the
    `tiles` tiles, from 0 by 1, and is the tile index of every access."""
    if not isinstance(nest, scf.ParallelOp) or len(nest.body.block.args) < 2:
        return False
    bounds = tuple(int_constant(v[0]) for v in (nest.lowerBound, nest.upperBound, nest.step))
    t = nest.body.block.args[0]
    return bounds == (0, tiles, 1) and all(a.operands[first_index(a)] is t for a in accesses)


def writes(op: Operation) -> set[SSAValue]:
    """The memrefs that `op` or an op in it stores to."""
    return {buffer_of(o) for o in op.walk() if isinstance(o, STORES)}


def reads(op: Operation) -> set[SSAValue]:
    return {buffer_of(o) for o in op.walk() if isinstance(o, LOADS)}


@dataclass(frozen=True)
class Fusion:
    """A copy nest and the nest that reads its buffer."""

    alloc: memref.AllocOp
    copy: scf.ParallelOp
    nest: scf.ParallelOp


def fusion(alloc: memref.AllocOp, min_bytes: int, max_bytes: int, min_tiles: int) -> Fusion | None:
    """The copy and reading nest of `alloc`'s buffer where `loops-pack-tiles` fuses them."""
    block = alloc.parent_block()
    buf = alloc.memref
    shape = buf.type.get_shape()
    size = nbytes(buf.type)
    if block is None or len(shape) < 2 or shape[0] < min_tiles:
        return None
    if size < min_bytes or size // shape[0] > max_bytes:
        return None
    users = [u.operation for u in buf.uses if not isinstance(u.operation, memref.DeallocOp)]
    stores = [o for o in users if isinstance(o, STORES) and buffer_of(o) is buf]
    loads = [o for o in users if isinstance(o, LOADS) and buffer_of(o) is buf]
    if len(stores) + len(loads) != len(users) or not stores or not loads:
        return None
    copies = {block.find_ancestor_op_in_block(o) for o in stores}
    nests = {block.find_ancestor_op_in_block(o) for o in loads}
    if len(copies) != 1 or len(nests) != 1:
        return None
    copy, nest = copies.pop(), nests.pop()
    if not tiled(copy, stores, shape[0]) or not tiled(nest, loads, shape[0]):
        return None
    between, op = [], copy.next_op
    while op is not None and op is not nest:
        between.append(op)
        op = op.next_op
    source = reads(copy)
    if op is None or any(writes(o) & source for o in between):
        return None
    assert isinstance(copy, scf.ParallelOp) and isinstance(nest, scf.ParallelOp)
    return Fusion(alloc, copy, nest)


def inner(nest: scf.ParallelOp, tile: SSAValue) -> scf.ParallelOp:
    """`nest` without its first dim, whose index becomes `tile`; `nest` is left empty."""
    block = nest.body.detach_block(nest.body.block)
    block.args[0].replace_all_uses_with(tile)
    block.erase_arg(block.args[0])
    lbs, ubs, steps = (list(vs)[1:] for vs in (nest.lowerBound, nest.upperBound, nest.step))
    new = scf.ParallelOp(lbs, ubs, steps, Region(block))
    new.attributes.update({k: v for k, v in nest.attributes.items() if k != OMP})
    return new


def fuse(f: Fusion) -> None:
    """Replaces the copy and the nest by one nest over the blocks (see the module doc)."""
    buf = f.alloc.memref
    ty = buf.type
    assert isinstance(ty, MemRefType)
    outer_block = Block(arg_types=[IndexType()])
    tile = outer_block.args[0]
    tile.name_hint = f.nest.body.block.args[0].name_hint
    zero = fast.constant(0)
    private = memref.AllocaOp.get(ty.element_type, None, [1, *ty.get_shape()[1:]])
    private.memref.name_hint = buf.name_hint
    for use in list(buf.uses):
        op = use.operation
        if isinstance(op, memref.DeallocOp):
            op.detach()
            op.erase()
            continue
        op.operands[first_index(op)] = zero.result
        op.operands[use.index] = private.memref
    bounds = ([f.nest.lowerBound[0]], [f.nest.upperBound[0]], [f.nest.step[0]])
    parts = [inner(f.copy, tile), inner(f.nest, tile)]
    outer_block.add_ops([zero, private, *parts, scf.ReduceOp()])
    outer = scf.ParallelOp(*bounds, Region(outer_block))
    parent = f.nest.parent_block()
    assert parent is not None
    parent.insert_op_before(outer, f.nest)
    for old in (f.copy, f.nest, f.alloc):
        old.detach()
        old.erase()


def pack_tiles(fn: func.FuncOp, min_bytes: int, max_bytes: int, min_tiles: int) -> None:
    """Moves every copy of `fn` that `fusion` picks into the nest reading it."""
    found = [
        f
        for op in list(fn.body.block.ops)
        if isinstance(op, memref.AllocOp)
        and (f := fusion(op, min_bytes, max_bytes, min_tiles)) is not None
    ]
    done = set()
    for f in found:
        if f.nest not in done:  # a nest that reads two copies takes the first
            done.add(f.nest)
            fuse(f)


@dataclass(frozen=True)
class LoopsPackTilesPass(ModulePass):
    """Makes large copies block by block inside the nests that read them.

    `ir-opt k.mlir -p 'loops-pack-tiles{min-bytes=2097152 max-bytes=1048576 min-tiles=8}'`
    """

    name = "loops-pack-tiles"

    min_bytes: int = MIN_BYTES
    max_bytes: int = MAX_BYTES
    min_tiles: int = MIN_TILES

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            pack_tiles(fn, self.min_bytes, self.max_bytes, self.min_tiles)
