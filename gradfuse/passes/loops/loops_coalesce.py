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
last k sizes are their trip counts (an access that uses none of them is left as it is);
the longest such k is taken. Each point keeps its element: results are unchanged.
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
    block_like,
    collapsed,
    dim_trips,
    int_constant,
    kernel_functions,
    replace_nest,
)
from gradfuse.passes.loops.loops_vectorize import MIN_LANES, innermost_nests

Access = memref.LoadOp | memref.StoreOp


def suffix_ok(nest: scf.ParallelOp, k: int) -> bool:
    """Whether the last `k` dims of `nest` may become one: each from 0 by 1, used only
    as the last `k` indices, in order, of accesses whose buffer ends in their sizes."""
    args = nest.body.block.args
    dims = list(args[len(args) - k :])
    sizes = [dim_trips(nest, j) for j in range(len(args) - k, len(args))]
    for j in range(len(args) - k, len(args)):
        if int_constant(nest.lowerBound[j]) != 0 or int_constant(nest.step[j]) != 1:
            return False
    if 0 in sizes:
        return False
    for d in dims:
        for use in d.uses:
            op = use.operation
            if not isinstance(op, Access):
                return False
            ty = op.memref.type
            assert isinstance(ty, MemRefType)
            indices = list(op.indices)
            if (
                indices[len(indices) - k :] != dims
                or list(ty.get_shape()[len(indices) - k :]) != sizes
            ):
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
    for op in list(body.walk()):
        if not isinstance(op, Access) or not any(i in dims for i in op.indices):
            continue
        rank = len(op.indices)
        if op.memref not in views:
            view = collapsed(op.memref, rank - k)
            parent.insert_op_before(view, nest)
            views[op.memref] = view.result
        indices = [*op.indices[: rank - k], e]
        new: Operation
        if isinstance(op, memref.LoadOp):
            new = memref.LoadOp.get(views[op.memref], indices)
        else:
            new = memref.StoreOp.get(op.value, views[op.memref], indices)
        op.parent_block().insert_op_before(new, op)  # type: ignore[union-attr]
        if op.results:
            op.results[0].replace_all_uses_with(new.results[0])
        op.detach()
        op.erase()
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
