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
  the operand), and
- is read again by at least `min-reuse` points of the nest (the points of the dims it
  does not depend on), so the copy costs little beside the reads it serves;
and where lanes could then run along the innermost dim: every other read there is
either contiguous along it or does not depend on it, and every store is contiguous.

```
// ir-opt conv.mlir -p loops-pack
%p = memref.alloc() : memref<4x4x512x256xf32>
...
scf.parallel (%i0, %t, %i2, %i3, %l) = (%c0, ...) to (%c512, %c16, %c4, %c4, %c16) ... {
  %i1 = arith.addi (arith.muli %t, %c16), %l : index       // co, in tiles of 16
  %v = memref.load %w[%i0, %i1, %i2, %i3] : memref<512x256x4x4xf32>
  memref.store %v, %p[%i2, %i3, %i0, %i1] : memref<4x4x512x256xf32>
}
scf.parallel (%d0, %d2, %d3, %d1) = ... {
  ... memref.load %p[%d5, %d6, %d4, %d1] ...
}
memref.dealloc %p : memref<4x4x512x256xf32>
```

The copy iterates in the order of the buffer it reads (contiguous reads), but for
the dim that becomes the copy's last: its points run innermost in tiles of `TILE` (a
blocked transpose, each step a whole line of the copy; DCGAN b8's kernels took 597
against 552 ms warm, one thread, on the 2-core developer machine). The C backend
gives the scratch buffer static storage (`loop_render`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse.affine import strides_of
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    depends,
    dim_trips,
    int_constant,
    kernel_functions,
    loop_bounds,
    own_index,
    replace_nest,
    scratch,
)
from gradfuse.passes.loops.loops_vectorize import contiguous, innermost_nests, innermost_reduction

MIN_REUSE = 8
"""Points of a nest that read each packed element, below which an operand is not
packed: the copy reads and writes each element once, the nest reads it this often."""


TILE = 16
"""Points of the innermost dim a packed nest runs for all its other points before the
next (`tile_outermost`): 2 vectors of lanes, so the packed rows that one tile reads (a
16-channel panel of a convolution's weight, at most a few hundred KiB) stay in cache
while every output point uses them, where streaming all of it per point would not."""


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


def iv_trips(iv: SSAValue) -> int | None:
    """The iterations of a loop index that runs from 0 by 1 (a dim of an `scf.parallel`
    or an `scf.for`), else None."""
    bounds = loop_bounds(iv)
    if bounds is None or int_constant(bounds[0]) != 0 or int_constant(bounds[2]) != 1:
        return None
    return int_constant(bounds[1])


def computed_from(v: SSAValue, order: list[SSAValue]) -> bool:
    """Whether `v` is index arithmetic on loop indices of `order` and constants."""
    if v in order:
        return True
    op = v.owner
    if not isinstance(op, Operation) or op.regions or op.dialect_name() != "arith":
        return False
    return all(computed_from(o, order) for o in op.operands)


def index_loops(load: memref.LoadOp, order: list[SSAValue]) -> list[SSAValue] | None:
    """The loop indices that `load`'s indices are computed from (index arithmetic, not
    each an index itself), in loop order, the innermost dim (`order[-1]`) among them;
    None where the load is not such a read or a loop's bounds are not constants."""
    idx = list(load.indices)
    if not all(computed_from(i, order) for i in idx):
        return None
    used = [iv for iv in order if any(depends(i, iv) for i in idx)]
    if order[-1] not in used or own_index(idx, order[-1]) == len(idx) - 1:
        return None
    trips = [iv_trips(iv) for iv in used]
    size = prod(load.memref.type.get_shape())  # type: ignore[attr-defined]
    if not all(trips) or prod(t or 0 for t in trips) > size:
        return None  # (a copy larger than the operand: a window's im2col)
    return used


def clone_indices(
    indices: list[SSAValue], at: dict[SSAValue, SSAValue], ops: list[Operation]
) -> list[SSAValue]:
    """`indices` computed again from the values `at` maps loop indices to: the ops that
    compute them cloned into `ops`."""

    def value(v: SSAValue) -> SSAValue:
        if v not in at:
            op = v.owner
            assert isinstance(op, Operation)
            new = op.clone_without_regions()
            for k, o in enumerate(op.operands):
                new.operands[k] = value(o)
            ops.append(new)
            for old, res in zip(op.results, new.results):
                at[old] = res
        return at[v]

    return [value(i) for i in indices]


INDEX_ARITH = {arith.AddiOp: operator.add, arith.SubiOp: operator.sub, arith.MuliOp: operator.mul}


def _value(v: SSAValue, at: dict[SSAValue, int]) -> int | None:
    """`v` computed from loop indices set to `at` (constants, +, -, *), else None."""
    if v in at:
        return at[v]
    op = v.owner
    if isinstance(op, arith.ConstantOp):
        return int_constant(v)
    fn = INDEX_ARITH.get(type(op))  # type: ignore[arg-type]
    if fn is None:
        return None
    a, b = _value(op.operands[0], at), _value(op.operands[1], at)  # type: ignore[union-attr]
    return None if a is None or b is None else fn(a, b)


def source_order(load: memref.LoadOp, ivs: list[SSAValue]) -> list[int]:
    """The positions of `ivs` ordered by how far a step of each moves `load` through its
    buffer, the farthest first, but for the last (the lanes' dim, contiguous in the
    copy): a copy in this order reads the buffer nearly in its own order (a weight's
    taps of one input channel, a few KiB, stay in cache while they are copied) and
    writes whole vectors. A step that cannot be computed counts as none."""
    strides = strides_of(load.memref.type.get_shape())  # type: ignore[attr-defined]
    origin = {iv: 0 for iv in ivs}

    def offset(at: dict[SSAValue, int]) -> int:
        values = [_value(i, at) for i in load.indices]
        return sum(s * (v or 0) for s, v in zip(strides, values))

    steps = [abs(offset({**origin, iv: 1}) - offset(origin)) for iv in ivs]
    return [*sorted(range(len(ivs) - 1), key=lambda k: -steps[k]), len(ivs) - 1]


def box_nest(sizes: list[int], body: Block) -> tuple[scf.ParallelOp, list[Operation]]:
    """An `scf.parallel` over [0, sizes) by 1 around `body`, and the constants it needs."""
    zero, one = fast.constant(0), fast.constant(1)
    ups = [fast.constant(s) for s in sizes]
    nest = scf.ParallelOp(
        [zero.result] * len(sizes), [u.result for u in ups], [one.result] * len(sizes),
        Region(body),
    )  # fmt: skip
    return nest, [zero, one, *ups]


def gather_nest(
    load: memref.LoadOp, target: SSAValue, ivs: list[SSAValue]
) -> tuple[scf.ParallelOp, list[Operation]]:
    """`target[i...] = load's buffer[load's indices at i...]` over the loop indices
    `ivs` (iterated in the buffer's order, `source_order`), and the constants it needs."""
    order = source_order(load, ivs)
    body = Block(arg_types=[fast.INDEX] * len(ivs))
    at = {ivs[k]: arg for k, arg in zip(order, body.args)}
    ops: list[Operation] = []
    idx = clone_indices(list(load.indices), dict(at), ops)
    read = fast.load(load.memref, idx)
    body.add_ops([*ops, read, fast.store(read.results[0], target, [at[iv] for iv in ivs])])
    body.add_op(scf.ReduceOp())
    return box_nest([iv_trips(ivs[k]) or 0 for k in order], body)


def copy_nest(
    source: SSAValue, target: SSAValue, perm: list[int]
) -> tuple[scf.ParallelOp, list[Operation]]:
    """`target[i[perm[0]], i[perm[1]], ...] = source[i]` over `source`'s shape, and the
    constants it needs. The copy runs in `source`'s order, but for the dim that becomes
    `target`'s last (`j = perm[-1]`): its points run innermost in tiles of `TILE` (a
    blocked transpose), so each step writes a whole line of `target` and the `TILE`
    lines of `source` it reads stay in cache until all their points are copied; a
    store per point strided by `target`'s row length would touch a line each."""
    shape = list(source.type.get_shape())  # type: ignore[attr-defined]
    j = perm[-1]
    blocked = j != len(shape) - 1 and shape[j] % TILE == 0
    sizes = [*shape[:j], shape[j] // TILE, *shape[j + 1 :], TILE] if blocked else shape
    body = Block(arg_types=[fast.INDEX] * len(sizes))
    idx = list(body.args)
    width: list[Operation] = []
    if blocked:
        width.append(fast.constant(TILE))
        start = fast.index_op(arith.MuliOp, idx[j], width[0].results[0])
        at = fast.index_op(arith.AddiOp, start.results[0], idx[-1])
        body.add_ops([start, at])
        idx = [*idx[:j], at.results[0], *idx[j + 1 : -1]]
    load = fast.load(source, idx)
    store = fast.store(load.results[0], target, [idx[k] for k in perm])
    body.add_ops([load, store, scf.ReduceOp()])
    nest, consts = box_nest(sizes, body)
    return nest, [*width, *consts]


def tile_outermost(nest: scf.ParallelOp, size: int) -> scf.ParallelOp | None:
    """Splits the innermost dim `d` of `nest` (from 0, step 1, a multiple of `size`
    points, more than one tile) into tiles of `size`: the tile starts `d` (stepping by
    `size`) become the outermost dim, the points of a tile (`t`) stay innermost, and the
    body reads `d + t`. The new nest, or None where it cannot."""
    k = len(nest.body.block.args) - 1
    n = dim_trips(nest, k)
    if int_constant(nest.lowerBound[k]) != 0 or int_constant(nest.step[k]) != 1:
        return None
    if n <= size or n % size:
        return None
    old = nest.body.block
    new_block = Block(arg_types=[fast.INDEX] * (k + 2))
    tile, point = new_block.args[0], new_block.args[-1]
    tile.name_hint = old.args[k].name_hint
    for a, b in zip(old.args[:k], new_block.args[1:-1]):
        b.name_hint = a.name_hint
        a.replace_all_uses_with(b)
    index = fast.index_op(arith.AddiOp, tile, point)
    new_block.add_op(index)
    old.args[k].replace_all_uses_with(index.results[0])
    for o in list(old.ops):
        o.detach()
        new_block.add_op(o)
    width = fast.constant(size)
    lbs, ubs, steps = (list(v) for v in (nest.lowerBound, nest.upperBound, nest.step))
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_op_before(width, nest)
    return replace_nest(nest, new_block, (
        [lbs[k], *lbs[:k], lbs[k]], [ubs[k], *ubs[:k], width.result],
        [width.result, *steps[:k], steps[k]],
    ))  # fmt: skip


def pack(fn: func.FuncOp, nest: scf.ParallelOp, min_reuse: int = MIN_REUSE) -> int:
    """Packs the operands of `nest` (in function `fn`) that qualify (see the module
    docstring); how many."""
    loop = innermost_reduction(nest)
    if loop is None or contiguous(loop):
        return 0  # none, or a dot product along the reduction (`loops-vectorize`)
    order = loop_indices(nest, loop)
    count = 0
    for load in [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]:
        buf = load.memref
        perm = pack_order(load, order)
        ivs = index_loops(load, order) if perm is None else None
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
        target = scratch(fn, buf.type.element_type, packed_shape, "packed")  # type: ignore[attr-defined]
        copy, consts = (
            copy_nest(buf, target, perm) if perm is not None
            else gather_nest(load, target, indices)
        )  # fmt: skip
        parent = nest.parent_block()
        assert parent is not None
        parent.insert_ops_before([*consts, copy], nest)
        new = fast.load(target, indices)
        load.parent_block().insert_op_before(new, load)  # type: ignore[union-attr]
        load.res.replace_all_uses_with(new.results[0])
        load.detach()
        load.erase()
        count += 1
    if count:
        tile_outermost(nest, TILE)
    return count


@dataclass(frozen=True)
class LoopsPackPass(ModulePass):
    """Copies operands that reductions read across their lanes into loop order.

    `ir-opt k.mlir -p 'loops-pack{min-reuse=8}'`
    """

    name = "loops-pack"

    min_reuse: int = MIN_REUSE

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                pack(fn, nest, self.min_reuse)
