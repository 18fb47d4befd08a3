"""`tg-lower-access`: views, permutes, broadcasts and slices become access maps.

Every reshape/permute/broadcast/slice becomes one `tg.view` whose affine map
sends result indices to input indices; a view of a view composes into one map,
simplified with the known dim sizes. `tg-fuse` then reads through the map, so
none of them costs a kernel or a copy:

    %r = tg.reshape %b : tensor<1x255xf32>
    %y = tg.broadcast %r : tensor<2x255xf32>
    // becomes
    %y = tg.view %b map=affine_map<(d0, d1) -> (d1)> : tensor<2x255xf32>
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.ir import Operation
from xdsl.ir.affine import AffineMap, AffineSet
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from gradfuse import affine
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import access_properties, ints, shape_of
from gradfuse.dialects.tg_builder import element_type, tensor_type
from gradfuse.passes.lib.op_facts import rewrite_walker


def _replace_with_view(
    rewriter: PatternRewriter, op: Operation, map: AffineMap, guard: AffineSet | None = None
) -> None:
    """Replaces `op` by a view of its input, composed with the input's own view."""
    shape = shape_of(op.results[0])
    source = op.operands[0]
    inner = source.owner
    if isinstance(inner, tg.ViewAccessOp):
        if inner.guard is not None:
            guard = affine.join_guards(guard, affine.compose_guard(inner.guard.data, map))
        map, source = inner.map.data.compose(map), inner.input
    map = affine.simplify(map, shape)
    guard = affine.simplify_guard(guard, shape) if guard is not None else None
    if guard is None and source.type == op.results[0].type and _is_identity(map, shape):
        rewriter.replace(op, [], [source])
    else:
        props = access_properties(map, guard)  # as its constructor does
        ty = tensor_type(shape, element_type(source))
        view = tg.ViewAccessOp.create(operands=[source], result_types=[ty], properties=props)
        view.location = op.location
        rewriter.replace(op, view)
    if isinstance(inner, tg.ViewAccessOp) and not inner.result.uses:
        rewriter.erase(inner)


VIEW_MAPS: dict[type[Operation], Callable[[Any], AffineMap]] = {
    tg.ReshapeOp: lambda op: affine.reshape_map(shape_of(op.input), shape_of(op.result)),
    tg.PermuteOp: lambda op: affine.permute_map(ints(op.perm)),
    tg.BroadcastOp: lambda op: affine.broadcast_map(shape_of(op.input), shape_of(op.result)),
    tg.SliceOp: lambda op: affine.slice_map(ints(op.starts), ints(op.strides)),
}
"""The map from result to input indices of each movement op: the row-major index map
(reshape), the permuted dims, index 0 of each size-1 dim (broadcast), `start + i * stride`
per dim (slice)."""


class MovementToView(RewritePattern):
    """`tg.reshape`, `tg.permute`, `tg.broadcast`, `tg.slice` -> `tg.view` with the map
    of `VIEW_MAPS`."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        view_map = VIEW_MAPS.get(type(op))
        if view_map is not None:
            _replace_with_view(rewriter, op, view_map(op))


class ZeroPadToView(RewritePattern):
    """A zero `tg.pad` is a guarded view: no copy, no kernel."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.PadOp, rewriter: PatternRewriter) -> None:
        if op.value.value.data != 0.0:
            return
        low, sizes = ints(op.low), shape_of(op.input)
        d = affine.dims(len(low))
        map = AffineMap(len(low), 0, tuple(d[k] - lo for k, lo in enumerate(low)))
        _replace_with_view(rewriter, op, map, affine.pad_guard(low, sizes))


class ComposeViews(RewritePattern):
    """A view of a view reads the first input through the composed map; an identity
    view is no view at all."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tg.ViewAccessOp, rewriter: PatternRewriter) -> None:
        guard = op.guard.data if op.guard is not None else None
        if isinstance(op.input.owner, tg.ViewAccessOp) or (
            guard is None and _is_identity(op.map.data, shape_of(op.result))
        ):
            _replace_with_view(rewriter, op, op.map.data, guard)


def _is_identity(map: AffineMap, shape: tuple[int, ...]) -> bool:
    simple = affine.simplify(map, shape)
    return simple == affine.simplify(affine.identity_map(len(shape)), shape)


def populate_tg_lower_access_patterns() -> list[RewritePattern]:
    """The patterns of `tg-lower-access`."""
    return [MovementToView(), ZeroPadToView(), ComposeViews()]


@dataclass(frozen=True)
class TgLowerAccessPass(ModulePass):
    """Turns every view-like op into a `tg.view` with one simplified affine map."""

    name = "tg-lower-access"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        # One forward walk suffices: a view's input is rewritten before the view.
        rewrite_walker(
            populate_tg_lower_access_patterns(),
            apply_recursively=False,
        ).rewrite_module(op)
