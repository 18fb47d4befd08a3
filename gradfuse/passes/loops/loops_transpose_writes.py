"""`loops-transpose-writes`: jammed writes across the lanes become contiguous stores.

A convolution's register block (`loops-unroll-jam`) holds its lanes along the output
channels and its jammed points along the image row: each of its vectors is written
to an NCHW output across a dim (`vector.transfer_write` along the channels, one scalar
store a lane in C). Where W such writes (W the lanes) differ only in the last index,
by 0 to W-1, they are one W x W tile of the buffer: its transpose, 3 x W shuffles as
MLIR's `vector.transpose` lowers to on AVX (`unpcklps`/`unpckhps`, `shufps`,
`vperm2f128`), is W vectors along the buffer's last dim, each a `vector.store`. DCGAN
b8's kernels held 8,488 lane stores, a third of their C. A block of 4 rows (the register
blocks of a machine with 16 vector registers, `jam-rows=4`) holds 4 x 8 tiles: the
first two stages leave each column of 4 in a half of a vector, stored as a
`vector<4xf32>` (a 128-bit store: `vextractf128` for the upper half). Writes of 16
lanes (`loops-vectorize{lanes=16}`) are 8 x 16 or 4 x 16 tiles: each row's two halves
of 8 lanes (`vextractf32x8`) are transposed as two tiles of 8 lanes, 16 stores.

```
// ir-opt conv.mlir -p loops-transpose-writes
vector.transfer_write %v0, %y[%d0, %d1, %d2, %d3] {in_bounds = [true],
    permutation_map = affine_map<(d0, d1, d2, d3) -> (d1)>} : vector<8xf32>, memref<...>
...  // %v1 .. %v7 at %d3 + 1 .. %d3 + 7
// becomes
%t0 = vector.shuffle %v0, %v1 [0, 8, 1, 9, 4, 12, 5, 13] : vector<8xf32>, vector<8xf32>
...  // 24 shuffles
vector.store %r0, %y[%d0, %d1, %d2, %d3] : memref<...>, vector<8xf32>
%c1 = arith.addi %d1, %c1_0 : index
vector.store %r1, %y[%d0, %c1, %d2, %d3] : memref<...>, vector<8xf32>
...
```

A write across the lanes in a loop whose index is its last (a batch norm's sums over
an NHWC input, the lanes along the channels, writing the centred values NCHW in the
loop over W) makes tiles once the loop is unrolled by 8 (`tiled_loop`): the copies in
order, their writes last. ResNet-18 b8's first batch norm (32 x 32 images, the lanes a
page apart: scalar before) 1.24-1.54 -> 0.46-0.48 ms a call, the others (16 x 16) 68
-> 46 us (one thread, 2-core Zen 3; the first of them profiled in the program, the
second in a loop of its own C):

```
%s = scf.for %w = %c0 to %c16 step %c1 iter_args(%acc = %z) -> (vector<8xf32>) {
  %d = arith.subf %x, %mean : vector<8xf32>
  vector.transfer_write %d, %y[%n, %c, %h, %w] {permutation_map = (d0, d1, d2, d3) -> (d1)}
// becomes
%s = scf.for %w = %c0 to %c16 step %c8 iter_args(%acc = %z) -> (vector<8xf32>) {
  %d = arith.subf ...  // for %w, then %w + 1 ... %w + 7, the sum carried through
  ... 24 shuffles, 8 vector.store along W
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf, vector
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, VectorType, i64
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    LOADS,
    STORES,
    Form,
    Write,
    buffer_of,
    int_constant,
    kernel_functions,
    transfer_dim,
    writes,
)

LANES = 8
"""The tile's width: the transpose below is that of 8 x 8 or 4 x 8."""
WIDE = 16
"""The lanes of writes whose tiles are transposed as two of `LANES`: the rows' halves."""
ROWS = (LANES, 4)
"""The tile's rows: the writes of 8 or 4 points along the buffer's last dim."""
STAGES = (
    ((0, 8, 1, 9, 4, 12, 5, 13), (2, 10, 3, 11, 6, 14, 7, 15)),  # unpcklps, unpckhps
    ((0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15)),  # shufps 0x44, 0xee
    ((0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)),  # vperm2f128 0x20, 0x31
)
"""Each stage's two shuffle masks, applied to pairs of vectors 1, 2 and 4 apart."""
MASKS = [tuple(DenseArrayBase.from_list(i64, m) for m in masks) for masks in STAGES]
COLUMNS = (0, 2, 1, 3, 4, 6, 5, 7)
"""Where the stages leave each column of the tile (column 1 in vector 2); with 4 rows,
the first two stages leave column j in half j // 4 of vector COLUMNS[j % 4]."""


def half(v: SSAValue, k: int, into: list[Operation]) -> SSAValue:
    """Half `k` (0: the low lanes, 1: the high) of vector `v` (f32, or a mask's i1), as a
    shuffle added to `into`: `vextractf128` of 8 lanes, `vextractf32x8` of 16."""
    n = v.type.get_shape()[0] // 2  # type: ignore[attr-defined]
    mask = DenseArrayBase.from_list(i64, list(range(k * n, (k + 1) * n)))
    op = vector.ShuffleOp(v, v, mask, result_type=VectorType(v.type.element_type, [n]))  # type: ignore[attr-defined]
    into.append(op)
    return op.result


def transpose(rows: list[SSAValue], into: list[Operation]) -> list[SSAValue]:
    """The columns of the 8 x 8 or 4 x 8 tile whose rows are `rows` (column j: lane j of
    each row; of 4 rows, vectors of 4), as shuffles added to `into`."""
    vs = list(rows)
    for stage, (lo, hi) in enumerate(MASKS[: len(rows).bit_length() - 1]):
        apart = 1 << stage
        out = list(vs)
        for base in range(len(vs)):
            if base & apart:
                continue
            a, b = vs[base], vs[base + apart]
            for k, mask in ((base, lo), (base + apart, hi)):
                op = vector.ShuffleOp(a, b, mask, result_type=a.type)  # type: ignore[arg-type]
                into.append(op)
                out[k] = op.result
        vs = out
    if len(rows) == LANES:
        return [vs[k] for k in COLUMNS]
    return [half(vs[COLUMNS[j % 4]], j // 4, into) for j in range(LANES)]


Key = tuple[SSAValue, int, tuple[object, ...]]


def tile_key(write: Write) -> tuple[Key, int] | None:
    """What the 8 writes of one tile share (buffer, lane dim, the affine forms of the
    indices, the last one's without its constant), and this write's constant; None
    for a write that no tile holds (lanes along the last dim, a non-affine index)."""
    if write.lanes not in (LANES, WIDE) or write.along == len(write.forms) - 1:
        return None
    forms = [f for f in write.forms if f is not None]
    if len(forms) < len(write.forms):
        return None
    shape = [tuple(sorted((id(iv), c) for iv, c in terms.items())) for terms, _ in forms]
    consts = [const for _, const in forms]
    key = (write.source, write.along, (*zip(shape[:-1], consts[:-1]), shape[-1]))
    return key, consts[-1]


def rewrite(group: list[vector.TransferWriteOp], last: vector.TransferWriteOp) -> None:
    """Replaces the 8 or 4 writes of a tile (`group`, by their last index's offset) by
    a transpose and 8 contiguous stores (16 for writes of 16 lanes), after `last`, the
    last of them in its block."""
    first = group[0]
    along = transfer_dim(first)
    new: list[Operation] = []
    rows = [w.vector for w in group]
    if rows[0].type.get_shape()[0] == WIDE:  # type: ignore[attr-defined]
        low, high = zip(*[(half(v, 0, new), half(v, 1, new)) for v in rows], strict=True)
        columns = transpose(list(low), new) + transpose(list(high), new)
    else:
        columns = transpose(rows, new)
    for j, col in enumerate(columns):
        indices = list(first.indices)
        if j:
            step = fast.constant(j)
            moved = fast.index_op(arith.AddiOp, indices[along], step.result)
            new += [step, moved]
            indices[along] = moved.results[0]
        new.append(vector.StoreOp(col, first.source, indices))
    block = last.parent
    assert block is not None
    block.insert_ops_after(new, last)
    for w in group:
        w.detach()
        w.erase()


def transpose_block(block: Block) -> None:
    """Rewrites the complete tiles among each run of transfer writes of `block` (writes
    of disjoint elements between which only constants lie, `writes`: in any order the
    same)."""
    ops, i = list(block.ops), 0
    memo: dict[SSAValue, Form | None] = {}
    while i < len(ops):
        run, after = writes(ops, i, memo)
        i = after if run else i + 1
        tiles: dict[Key, dict[int, vector.TransferWriteOp]] = {}
        for w in run:
            found = tile_key(w)
            if found is not None:
                tiles.setdefault(found[0], {})[found[1]] = w.op
        order = [w.op for w in run]
        for at in tiles.values():
            low = min(at)
            rows = next((n for n in ROWS if sorted(at) == list(range(low, low + n))), 0)
            if rows:
                last = max(at.values(), key=order.index)
                rewrite([at[low + k] for k in range(rows)], last)


def tiled_loop(store: memref.StoreOp | vector.TransferWriteOp) -> scf.ForOp | None:
    """The loop that `unroll_tiles` unrolls so that its copies of `store` (a write across
    the lanes) make tiles: the `scf.for` around it (no loop inside, from 0 by 1, a
    multiple of `LANES` steps) whose index is the write's last index and no other's,
    and which reads or writes the buffers of its transfer writes in no other way. A batch norm's sums over an NHWC
    input write the centred values NCHW along the loop over W; else None."""
    loop = store.parent_op()
    if not isinstance(loop, scf.ForOp) or any(isinstance(o, scf.ForOp) for o in loop.body.walk()):
        return None
    lo, hi, by = (int_constant(v) for v in (loop.lb, loop.ub, loop.step))
    if lo != 0 or by != 1 or hi is None or hi % LANES:
        return None
    iv, indices = loop.body.block.args[0], list(store.indices)
    if indices[-1] is not iv or iv in indices[:-1]:
        return None
    moved = [o for o in loop.body.block.ops if isinstance(o, vector.TransferWriteOp)]
    written = {buffer_of(o) for o in [store, *moved]}
    others = [o for o in loop.body.walk() if isinstance(o, (*LOADS, *STORES)) and o not in moved]
    if any(buffer_of(o) in written for o in others if o is not store):
        return None  # (the writes move after the rest: nothing else may touch their buffers)
    return loop


def unroll_tiles(loop: scf.ForOp) -> None:
    """Unrolls `loop` by `LANES`: its body's copies for the indices `i` to `i + 7` in
    order (the sums it carries add in the same order), the writes of all copies after
    the rest, where `transpose_block` finds them as tiles."""
    body, (old_iv, *carried) = loop.body.block, loop.body.block.args
    new_body = Block(arg_types=[a.type for a in body.args])
    new_body.args[0].name_hint = old_iv.name_hint
    values = list(new_body.args[1:])
    moved: list[Operation] = []
    *ops, yield_op = body.ops
    for k in range(LANES):
        vm: dict[SSAValue, SSAValue] = dict(zip(carried, values))
        vm[old_iv] = new_body.args[0]
        if k:
            step = fast.constant(k)
            at = fast.index_op(arith.AddiOp, new_body.args[0], step.result)
            new_body.add_ops([step, at])
            vm[old_iv] = at.results[0]
        for op in ops:
            new = fast.clone(op, vm)
            (moved.append if isinstance(op, vector.TransferWriteOp) else new_body.add_op)(new)
        values = [vm.get(v, v) for v in yield_op.operands]
    new_body.add_ops([*moved, scf.YieldOp(*values)])
    by = fast.constant(LANES)
    new = scf.ForOp(loop.lb, loop.ub, by.result, loop.iter_args, Region(new_body))
    new.attributes.update(loop.attributes)
    parent = loop.parent
    assert parent is not None
    parent.insert_ops_before([by, new], loop)
    for old, result in zip(loop.results, new.results):
        old.replace_all_uses_with(result)
    loop.detach()
    loop.erase()


def tile_loops(fn: Operation) -> None:
    """Unrolls each loop whose transfer writes across the lanes move along its index
    (`tiled_loop`), once."""
    loops = {
        tiled_loop(w): None
        for w in fn.walk()
        if isinstance(w, vector.TransferWriteOp)
        and w.vector.type.get_shape()[0] in (LANES, WIDE)  # type: ignore[attr-defined]
        and transfer_dim(w) != len(w.indices) - 1
    }
    for loop in loops:
        if loop is not None:
            unroll_tiles(loop)


@dataclass(frozen=True)
class LoopsTransposeWritesPass(ModulePass):
    """Writes 8 x 8 and 4 x 8 tiles that a nest stores across its lanes as 8 contiguous
    stores (8 x 16 and 4 x 16 tiles as 16).

    `ir-opt k.mlir -p loops-transpose-writes`
    """

    name = "loops-transpose-writes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            tile_loops(fn)
            blocks = {
                w.parent: None for w in fn.walk() if isinstance(w, vector.TransferWriteOp)
            }  # (in order, once each)
            for block in blocks:
                if block is not None:
                    transpose_block(block)
