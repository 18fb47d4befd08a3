"""`loops-coalesce`: the trailing dims of an elementwise nest that every access walks
in memory order become one dim, so that lanes can run along it.

`loops-vectorize` strip-mines a nest's innermost dim into lanes of 8 or 16; a dim of
fewer points runs one scalar at a time. An elementwise nest over a convolution
weight, `[O, C, 4, 4]` (Adam's update of DCGAN's weights: a square root and a division
a point) or `[O, C, 3, 3]` (ResNet-18's SGD), has 4 or 3 points innermost, though each
of its reads and writes walks `C x 4 x 4` contiguous elements. As MLIR's
`affine-loop-coalescing` and linalg's collapsing of dims (IREE's
`CollapseDimensions`), this pass makes such trailing dims one dim `e` of their
product, and each access reads a collapsed view of its buffer
(`memref.collapse_shape`, the same elements: the C target prints the same pointer)
at `e`:

```
// ir-opt adam.mlir -p loops-coalesce
scf.parallel (%d0, %d1, %d2, %d3) = (%c0, %c0, %c0, %c0) to (%c128, %c64, %c4, %c4) ... {
  %m = memref.load %m0[%d0, %d1, %d2, %d3] : memref<128x64x4x4xf32>
  %lr = memref.load %s[] : memref<f32>
// becomes
%v = memref.collapse_shape %m0 [[0], [1, 2, 3]] : memref<128x64x4x4xf32> into memref<128x1024xf32>
scf.parallel (%d0, %e) = (%c0, %c0) to (%c128, %c1024) ... {
  %m = memref.load %v[%d0, %e] : memref<128x1024xf32>
  %lr = memref.load %s[] : memref<f32>
```

A nest is coalesced where it holds no loop (an elementwise nest), its innermost dim has
fewer than `MIN_LANES` points, and its last k >= 2 dims run from 0 by 1 to constants
and are used only as the last k indices, in order, of loads and stores of buffers whose
last k sizes are their trip counts (the first of them perhaps longer: a gradient whose
rows `kernel-pad-rows` padded), or only through a last index that flattens them in
row-major order, `d1 * 9 + d2 * 3 + d3`, of a buffer whose last size is at least their
product (a gradient kept as `[O, C * 9]`, which ResNet-18's SGD reads beside its
`[O, C, 3, 3]` weight: that access reads `e` itself). An access that uses none of them
is left as it is; the longest such k is taken. Each point keeps its element: results
are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import memref, scf
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import (
    affine_form,
    block_like,
    collapsed,
    depends,
    dim_trips,
    erase_dead,
    int_constant,
    kernel_functions,
    replace_nest,
)
from gradfuse.passes.loops.loops_vectorize import MIN_LANES, innermost_nests

Access = memref.LoadOp | memref.StoreOp


def flat(op: Access, dims: list[SSAValue], sizes: list[int]) -> bool:
    """Whether `op`'s last index is `dims` flattened in row-major order (`d1 * 9 + d2 * 3
    + d3` for sizes 16, 3, 3), its buffer's last size at least their product (a row
    that `kernel-pad-rows` padded is longer), and no other index depends on them."""
    *rest, last = op.indices
    strides = [prod(sizes[j + 1 :]) for j in range(len(sizes))]
    ty = op.memref.type
    assert isinstance(ty, MemRefType)
    return (
        affine_form(last) == (dict(zip(dims, strides)), 0)
        and ty.get_shape()[-1] >= prod(sizes)
        and not any(depends(i, d) for i in rest for d in dims)
    )


def ends_in(ty: MemRefType, sizes: list[int]) -> bool:
    """Whether a buffer's last dims are `sizes`, the first of them perhaps longer (a dim
    padded by `kernel-pad-rows`: the collapsed dim keeps each element's place)."""
    tail = list(ty.get_shape()[len(ty.get_shape()) - len(sizes) :])
    return len(tail) == len(sizes) and tail[0] >= sizes[0] and tail[1:] == sizes[1:]


def index_ops(v: SSAValue, dims: list[SSAValue]) -> set[Operation]:
    """The ops between `dims` and the index `v` that is computed from them."""
    op = v.owner
    if v in dims or not isinstance(op, Operation):
        return set()
    found = {op}
    for operand in op.operands:
        if any(depends(operand, d) for d in dims):
            found |= index_ops(operand, dims)
    return found


def flat_accesses(nest: scf.ParallelOp, k: int) -> tuple[list[Access], set[Operation]] | None:
    """The accesses of `nest` whose last index flattens its last `k` dims (`flat`), and
    the ops that compute those indices; None where a result of those ops has another use."""
    args = nest.body.block.args
    dims = list(args[len(args) - k :])
    sizes = [dim_trips(nest, j) for j in range(len(args) - k, len(args))]
    flats = [
        o for o in nest.body.walk() if isinstance(o, Access) and o.indices and flat(o, dims, sizes)
    ]
    chain: set[Operation] = set().union(*(index_ops(o.indices[-1], dims) for o in flats))
    for op in chain:
        for r in op.results:
            for use in r.uses:
                user = use.operation
                if user not in chain and not (user in flats and r is user.indices[-1]):  # type: ignore[union-attr]
                    return None
    return flats, chain


def suffix_ok(nest: scf.ParallelOp, k: int) -> bool:
    """Whether the last `k` dims of `nest` may become one: each from 0 by 1, used only
    as the last `k` indices, in order, of accesses whose buffer ends in their sizes, or
    through the flat last index of an access (`flat_accesses`)."""
    args = nest.body.block.args
    dims = list(args[len(args) - k :])
    sizes = [dim_trips(nest, j) for j in range(len(args) - k, len(args))]
    for j in range(len(args) - k, len(args)):
        if int_constant(nest.lowerBound[j]) != 0 or int_constant(nest.step[j]) != 1:
            return False
    if 0 in sizes:
        return False
    found = flat_accesses(nest, k)
    if found is None:
        return False
    chain = found[1]
    for d in dims:
        for use in d.uses:
            op = use.operation
            if op in chain:
                continue
            if not isinstance(op, Access):
                return False
            ty = op.memref.type
            assert isinstance(ty, MemRefType)
            indices = list(op.indices)
            if indices[len(indices) - k :] != dims or not ends_in(ty, sizes):
                return False
            if any(i in dims for i in indices[: len(indices) - k]):
                return False
    return True


def coalescible(nest: scf.ParallelOp) -> int:
    """How many trailing dims of `nest` become one (0: none)."""
    n = len(nest.body.block.args)
    if n < 2 or not 0 < dim_trips(nest, n - 1) < MIN_LANES:
        return 0
    if any(isinstance(o, scf.ForOp | scf.ParallelOp) for o in nest.body.walk()):
        return 0
    return next((k for k in range(n, 1, -1) if suffix_ok(nest, k)), 0)


def coalesce(nest: scf.ParallelOp, k: int) -> scf.ParallelOp:
    """Makes the last `k` dims of `nest` one, its accesses reading collapsed views."""
    body = nest.body.block
    n = len(body.args)
    keep = n - k
    count = prod(dim_trips(nest, j) for j in range(keep, n))
    zero, one, end = fast.constant(0), fast.constant(1), fast.constant(count)
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_ops_before([zero, one, end], nest)
    new_body: Block = block_like(body.args[:keep])
    e = new_body.insert_arg(body.args[-1].type, keep)
    e.name_hint = body.args[keep].name_hint
    views: dict[SSAValue, SSAValue] = {}
    dims = set(body.args[keep:])
    found = flat_accesses(nest, k)
    assert found is not None
    flats = found[0]
    for op in list(body.walk()):
        if not isinstance(op, Access):
            continue
        rank = len(op.indices)
        if op in flats:  # its last index flattens the dims: `e` itself, in the same buffer
            source, indices = op.memref, [*op.indices[:-1], e]
            erase = [op.indices[-1]]
        elif any(i in dims for i in op.indices):
            if op.memref not in views:
                view = collapsed(op.memref, rank - k)
                parent.insert_op_before(view, nest)
                views[op.memref] = view.result
            source, indices, erase = views[op.memref], [*op.indices[: rank - k], e], []
        else:
            continue
        new: Operation
        if isinstance(op, memref.LoadOp):
            new = memref.LoadOp.get(source, indices)
        else:
            new = memref.StoreOp.get(op.value, source, indices)
        op.parent_block().insert_op_before(new, op)  # type: ignore[union-attr]
        if op.results:
            op.results[0].replace_all_uses_with(new.results[0])
        op.detach()
        op.erase()
        erase_dead(erase)
    for old, arg in zip(body.args[:keep], new_body.args):
        old.replace_all_uses_with(arg)
    for op in list(body.ops):
        op.detach()
        new_body.add_op(op)
    lower = [*nest.lowerBound[:keep], zero.result]
    upper = [*nest.upperBound[:keep], end.result]
    step = [*nest.step[:keep], one.result]
    return replace_nest(nest, new_body, (lower, upper, step))


@dataclass(frozen=True)
class LoopsCoalescePass(ModulePass):
    """Makes the short trailing dims of each elementwise nest one dim, where every
    access walks them in memory order.

    `ir-opt k.mlir -p loops-coalesce`
    """

    name = "loops-coalesce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in innermost_nests(fn):
                k = coalescible(nest)
                if k:
                    coalesce(nest, k)
