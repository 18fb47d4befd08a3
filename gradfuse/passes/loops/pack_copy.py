"""The copy nests of `loops-pack` (and `loops-pad`'s `box_nest`): an operand copied
into a scratch buffer in the order its reduction reads it, tile-major where the reading
nest runs in tiles.

```
// copy_nest(w, p, perm=[2, 3, 1, 0], tiled=True): p[co / 16, kh, kw, ci, co % 16] = w[co, ci, kh, kw]
scf.parallel (%t, %ci, %kh, %kw, %q) = (%c0, ...) to (%c32, %c256, %c4, %c4, %c16) ... {
  %co = arith.addi (arith.muli %t, %c16), %q : index
  %v = memref.load %w[%co, %ci, %kh, %kw] : memref<512x256x4x4xf32>
  memref.store %v, %p[%t, %kh, %kw, %ci, %q] : memref<32x4x4x256x16xf32>
}
```
"""

from __future__ import annotations

import operator

from xdsl.dialects import arith, memref, scf
from xdsl.ir import Block, Operation, Region, SSAValue

from gradfuse.affine import strides_of
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import int_constant, loop_bounds

TILE = 16
"""Points of the innermost dim a packed nest runs for all its other points before the
next (`tile_outermost`): 2 vectors of 8 lanes, so the packed rows that one tile reads (a
16-channel panel of a convolution's weight, at most a few hundred KiB) stay in cache
while every output point uses them, where streaming all of it per point would not.
`loops-pack{tile=32}` makes them 2 vectors of 16 lanes where the reduction is long."""


def iv_trips(iv: SSAValue) -> int | None:
    """The iterations of a loop index that runs from 0 by 1 (a dim of an `scf.parallel`
    or an `scf.for`), else None."""
    bounds = loop_bounds(iv)
    if bounds is None or int_constant(bounds[0]) != 0 or int_constant(bounds[2]) != 1:
        return None
    return int_constant(bounds[1])


def clone_indices(
    indices: list[SSAValue],
    at: dict[SSAValue, SSAValue],
    ops: list[Operation],
    within: Block | None = None,
) -> list[SSAValue]:
    """`indices` computed again from the values `at` maps loop indices to: the ops that
    compute them cloned into `ops` (`within`: only the ops of that block, other values
    used as they are), `at` gaining the clones' results."""

    def value(v: SSAValue) -> SSAValue:
        if v not in at:
            op = v.owner
            if within is not None and (not isinstance(op, Operation) or op.parent is not within):
                return v
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
    if isinstance(op, arith.SelectOp):  # a guarded index: where the guard holds
        return _value(op.lhs, at)
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


def tile_point(tile: SSAValue, point: SSAValue, width: SSAValue) -> list[Operation]:
    """The ops of `tile * width + point` (a point's index from its tile and its place in
    the tile), the last one's result the index."""
    start = fast.index_op(arith.MuliOp, tile, width)
    return [start, fast.index_op(arith.AddiOp, start.results[0], point)]


def major_shape(shape: list[int], tile: int = TILE) -> list[int]:
    """The shape of a tile-major copy: `[..., n]` as `[n / tile, ..., tile]`."""
    return [shape[-1] // tile, *shape[:-1], tile]


def major_indices(indices: list[SSAValue], tile: SSAValue, point: SSAValue) -> list[SSAValue]:
    """Where a tile-major copy keeps `[..., tile * width + point]`: `[tile, ..., point]`."""
    return [tile, *indices[:-1], point]


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
    load: memref.LoadOp,
    target: SSAValue,
    ivs: list[SSAValue],
    tiled: bool,
    guard: arith.SelectOp | None = None,
    tile: int = TILE,
) -> tuple[scf.ParallelOp, list[Operation]]:
    """`target[i...] = load's buffer[load's indices at i...]` over the loop indices
    `ivs` (iterated in the buffer's order, `source_order`), and the constants it needs;
    `tiled`: `target` is tile-major (`tile_major`), the last index split into its tile
    of `tile` points and its point in the tile. `guard`: `select(g, load, c)`, the
    read's value, which the copy stores instead (c where g fails: a window padded to
    whole phases)."""
    order = source_order(load, ivs)
    sizes = [iv_trips(ivs[k]) or 0 for k in order]
    if tiled:
        sizes = [*sizes[:-1], sizes[-1] // tile, tile]
    body = Block(arg_types=[fast.INDEX] * len(sizes))
    ops: list[Operation] = []
    width = [fast.constant(tile)] if tiled else []
    lane = body.args[len(ivs) - 1]
    if tiled:
        ops += tile_point(lane, body.args[-1], width[0].results[0])
        lane = ops[-1].results[0]
    at = {ivs[k]: arg for k, arg in zip(order, [*body.args[: len(ivs) - 1], lane])}
    env: dict[SSAValue, SSAValue] = dict(at)
    idx = clone_indices(list(load.indices), env, ops)
    read = fast.load(load.memref, idx)
    ops.append(read)
    value = read.results[0]
    if guard is not None:
        cond, other = clone_indices([guard.cond, guard.rhs], env, ops)
        ops.append(fast.select(cond, value, other))
        value = ops[-1].results[0]
    where = [at[iv] for iv in ivs]
    if tiled:
        where = major_indices(where, body.args[len(ivs) - 1], body.args[-1])
    body.add_ops([*ops, fast.store(value, target, where)])
    body.add_op(scf.ReduceOp())
    nest, consts = box_nest(sizes, body)
    return nest, [*width, *consts]


def copy_nest(
    source: SSAValue, target: SSAValue, perm: list[int], tiled: bool, tile: int = TILE
) -> tuple[scf.ParallelOp, list[Operation]]:
    """`target[i[perm[0]], i[perm[1]], ...] = source[i]` over `source`'s shape, and the
    constants it needs. The copy runs in `source`'s order, but for the dim that becomes
    `target`'s last (`j = perm[-1]`): its points run innermost in tiles of `tile` (a
    blocked transpose), so each step writes a whole line of `target` and the `tile`
    lines of `source` it reads stay in cache until all their points are copied; a
    store per point strided by `target`'s row length would touch a line each.
    `tiled`: `target` is tile-major (`tile_major`), `[i[j] / tile, ..., i[j] % tile]`."""
    shape = list(source.type.get_shape())  # type: ignore[attr-defined]
    j = perm[-1]
    blocked = j != len(shape) - 1 and shape[j] % tile == 0
    assert blocked or not tiled
    sizes = [*shape[:j], shape[j] // tile, *shape[j + 1 :], tile] if blocked else shape
    body = Block(arg_types=[fast.INDEX] * len(sizes))
    idx = list(body.args)
    width = [fast.constant(tile)] if blocked else []
    if blocked:
        at = tile_point(idx[j], idx[-1], width[0].results[0])
        body.add_ops(at)
        idx = [*idx[:j], at[-1].results[0], *idx[j + 1 : -1]]
    load = fast.load(source, idx)
    where = [idx[k] for k in perm]
    if tiled:
        where = major_indices(where, body.args[j], body.args[-1])
    store = fast.store(load.results[0], target, where)
    body.add_ops([load, store, scf.ReduceOp()])
    nest, consts = box_nest(sizes, body)
    return nest, [*width, *consts]
