"""The graph `tg-fuse`'s planner works on (see `fusion`): groups (future kernels) and
host nodes, their members, and how a value is read through views.

`resolve(v)` looks through a chain of `tg.view`s to the value they read and the
composed access map:

    %t = tg.view %w map=affine_map<(d0, d1) -> (d1, d0)> : tensor<4x8xf32>
    resolve(%t) == (%w, affine_map<(d0, d1) -> (d1, d0)>)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, lru_cache
from math import prod

import numpy as np
from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineExpr, AffineMap, AffineSet

from gradfuse import affine
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of

ELEMENTWISE = (tg.BinaryOp, tg.UnaryOp, tg.WhereOp, tg.CastOp, tg.GatherOp, tg.RandomOp)
SHAPED = (tg.PadOp, tg.ConcatOp)  # elementwise over their result, with index conditions
HOST = (tg.FeederOp, tg.ReceiverOp, tg.AllReduceOp, tg.ForOp, func.ReturnOp, tg.YieldOp)


@dataclass(eq=False)
class Node:
    """A scheduling node: a group (kernel) or a host op, with its dependency edges.

    `level` is 1 + the deepest dependency's level, kept up to date as edges are
    added, so a node can only depend on nodes of lower levels."""

    deps: set[Node] = field(default_factory=set, kw_only=True)
    users: set[Node] = field(default_factory=set, kw_only=True)
    level: int = field(default=0, kw_only=True)
    ordered: bool = field(default=False, kw_only=True)  # has an edge besides data flow


@dataclass(eq=False)
class Member:
    """An op in a group, evaluated at `map`; `operand_maps` for a root's operands."""

    op: Operation
    map: AffineMap
    prologue: bool = False
    operand_maps: tuple[AffineMap, ...] | None = None
    fill: bool = False  # stores zeros into the op's result (before a scatter_add)
    views: list[SSAValue] = field(default_factory=list)  # also stored laid out as these
    stored: bool = False  # read outside the group: the kernel stores it (see `stores`)
    into: SSAValue | None = None  # a scatter_add adding into this param read in place


@dataclass(eq=False)
class Group(Node):
    """One kernel to be: members in program order over one domain."""

    id: int
    kind: str
    domain: tuple[int, ...]
    parallel: int
    members: list[Member] = field(default_factory=list)

    def member_of(self, op: object) -> Member | None:
        for m in reversed(self.members):  # recent members are asked for most
            if m.op is op:
                return m
        return None


@dataclass(eq=False)
class Host(Node):
    """A host op: feeder, receiver, all-reduce, loop, return or yield."""

    op: Operation


def first_op(node: Node) -> Operation:
    """An op of `node` to point an error at: a host op, or a group's first member."""
    return node.op if isinstance(node, Host) else node.members[0].op  # type: ignore[attr-defined]


def inner(value: SSAValue) -> SSAValue:
    """The value inside a `tg.fusion` that `value`, a result of it, is (else `value`)."""
    while isinstance(value.owner, tg.FusionOp):
        value = value.owner.yielded(value)
    return value


@cache
def look_through(value: SSAValue) -> tuple[SSAValue, AffineMap, AffineSet | None]:
    """The non-view value behind `value`, the map from `value`'s indices to it and the
    guard (over `value`'s indices) of the views between, where `value` is 0 (padding)
    when it fails; it looks through views and the results of `tg.fusion`s."""
    guard: AffineSet | None = None
    map = affine.identity_map(len(shape_of(value)))
    value = inner(value)
    while isinstance(value.owner, tg.ViewAccessOp):
        view = value.owner
        if view.guard is not None:
            guard = affine.join_guards(guard, affine.compose_guard(view.guard.data, map))
        map = view.map.data.compose(map)
        value = inner(view.input)
    return value, map, guard


def resolve(value: SSAValue) -> tuple[SSAValue, AffineMap]:
    """The non-view value behind `value` and the map to it (`look_through`)."""
    base, map, _ = look_through(value)
    return base, map


HOST_READS = (tg.ReceiverOp, tg.AllReduceOp, func.ReturnOp)  # host ops that read a laid-out copy


def stores(g: Group) -> None:
    """Marks the members whose value is read outside `g` (so its kernel stores them)."""
    members = {m.op for m in g.members}
    for m in g.members:
        if not m.fill and m.op.results:
            m.stored = stored(members, m.op.results[0], m.views)


def stored(
    members: set[Operation], value: SSAValue, views: list[SSAValue], plain_copy: bool = False
) -> bool:
    """Whether some op outside `members` reads `value` (other than a host op reading
    one of `views`, which the group stores laid out on their own: `plain_copy` says
    that `value` is such a view). Kernels read through views to the base value, so
    a view that is both received and read by a kernel needs the base stored too."""
    for use in value.uses:
        user = use.operation
        if isinstance(user, tg.ViewAccessOp):
            if stored(members, user.result, views, user.result in views):
                return True
        elif user not in members and not (plain_copy and isinstance(user, HOST_READS)):
            return True
    return False


@lru_cache(maxsize=4096)
def bijective(map: AffineMap, shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `map` sends the points of `shape` one-to-one onto those of `target`
    (checked by evaluating it, up to 2**22 points; beyond, only permutations)."""
    if prod(shape) != prod(target) or len(map.results) != len(target):
        return False
    dims = [r.position for r in map.results if isinstance(r, AffineDimExpr)]
    if len(dims) == len(shape) == len(target) and sorted(dims) == list(range(len(shape))):
        return all(shape[d] == t for d, t in zip(dims, target))
    if prod(shape) > 1 << 22:
        return False
    where = affine.eval_grid(map, shape)
    if any(w.min() < 0 or w.max() >= t for w, t in zip(where, target) if w.size):
        return False
    flat = np.ravel_multi_index(where, target) if target else np.zeros(1, np.int64)
    hit = np.zeros(prod(target), dtype=bool)  # as many points as targets: onto iff one-to-one
    hit[flat.reshape(-1)] = True
    return bool(hit.all())


def is_splat(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, tg.ConstantOp) and owner.is_splat


def view_uses(value: SSAValue) -> list[Operation]:
    """The ops that use `value`, looking through views."""
    out: list[Operation] = []
    for use in value.uses:
        if isinstance(use.operation, tg.ViewAccessOp):
            out.extend(view_uses(use.operation.result))
        else:
            out.append(use.operation)
    return out


def unit_map(domain: tuple[int, ...], shape: tuple[int, ...]) -> AffineMap | None:
    """The map from `domain` to `shape` where they are the same dims but for unit dims
    (`(d0, d1, d2) -> (d1, d2)` from [1, 4, 8] to [4, 8]); None where they are not."""
    if [n for n in domain if n != 1] != [n for n in shape if n != 1]:
        return None
    dims = iter(i for i, n in enumerate(domain) if n != 1)
    zero = AffineExpr.constant(0)
    results = tuple(zero if n == 1 else AffineExpr.dimension(next(dims)) for n in shape)
    return AffineMap(len(domain), 0, results)


def unit_join(g: Group, value: SSAValue, shape: tuple[int, ...]) -> AffineMap | None:
    """Where g's dims are `shape`'s with unit dims between (a group that also writes a
    stack slot [1, B, H]), the map dropping them, if g has `value` at that point (so an
    op on `value` over `shape` may join g); else None."""
    at = unit_map(g.domain[: g.parallel], shape)
    base, vmap, guard = look_through(value)
    member = g.member_of(base.owner)
    if at is None or guard is not None or member is None or member.prologue:
        return None
    return at if affine.simplify(vmap.compose(at), g.domain[: g.parallel]) == member.map else None


def reads_own_point(g: Group, key: str, at: AffineMap) -> bool:
    """g reads param `key` only at the point each thread writes (`at`: safe in place)."""
    domain = g.domain[: g.parallel]
    for m in g.members:
        for operand in m.op.operands:
            base, vmap = resolve(operand)
            if not (isinstance(base.owner, tg.ParamOp) and base.owner.key.data == key):
                continue
            if m.prologue or m.operand_maps is not None:
                return False  # read across the reduction: other points too
            if affine.simplify(vmap.compose(m.map), domain) != affine.simplify(at, domain):
                return False
    return True


def uniform(value: SSAValue) -> bool:
    """Whether `value` is one scalar everywhere (a view of a one-element tensor), as the
    slot index of a stack write is."""
    return prod(shape_of(resolve(value)[0])) == 1


def accumulation(op: tg.ScatterAddOp) -> tuple[SSAValue, tg.AddOp, tg.AssignOp] | None:
    """The param read, add and assign of `tg.assign "k", (tg.param "k" + op)` when they
    are the only read and write of "k" in the block: the scatter then adds into k's
    buffer in place, with no zero fill and no add over the whole buffer (a slot write
    into a loop's stack costs its slot, not the stack):

        %s = tg.param "loop0.carry1" : tensor<35x20x200xf32>
        %z = tg.scatter_add %i, %v dim=0 : tensor<35x20x200xf32>
        %n = tg.add %s, %z : tensor<35x20x200xf32>
        tg.assign "loop0.carry1", %n
    """
    use = op.result.get_unique_use()
    add = use.operation if use is not None else None
    if not isinstance(add, tg.AddOp) or not add.result.has_one_use():
        return None
    assign = add.result.get_unique_use().operation  # type: ignore[union-attr]
    read = add.lhs if add.rhs is op.result else add.rhs
    param = read.owner
    if not (
        isinstance(assign, tg.AssignOp)
        and isinstance(param, tg.ParamOp)
        and param.key == assign.key
        and read.has_one_use()
        and read.type == add.result.type
        and param.parent is assign.parent is op.parent
    ):
        return None
    key, block = assign.key, op.parent
    assert block is not None
    touching = [o for o in block.walk() if isinstance(o, tg.ParamOp | tg.AssignOp) and o.key == key]
    return (read, add, assign) if touching == [param, assign] else None


NOT_FUSED = (*tg.COMPOSITES, tg.GradOp, tg.ReshapeOp, tg.PermuteOp, tg.BroadcastOp, tg.SliceOp)
"""What tg-fuse never sees in a pipeline: composites and tg.grad (expanded by tg-autodiff
and tg-decompose) and views (turned into `tg.view` by `tg-lower-access`)."""


def not_lowered(op: Operation) -> GradfuseError:
    """The error for an op of `NOT_FUSED` that reached tg-fuse."""
    return GradfuseError(
        f"tg-fuse: {op.name} must be expanded or lowered first"
        " (tg-autodiff, tg-decompose, tg-lower-access)",
        position_of(op.location),
    )


def one_to_one(map: AffineMap, domain: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether `map` visits every point of `shape` exactly once over `domain` (then
    a prologue computes each value once, and may store values others need)."""
    dims = [r.position for r in map.results if isinstance(r, AffineDimExpr)]
    return (
        len(dims) == len(map.results) == len(domain)
        and sorted(dims) == list(range(len(domain)))
        and all(domain[d] == n for d, n in zip(dims, shape))
    )


def private_to(src: Group, root: Operation) -> bool:
    """Whether every use of `src`'s values is in `src` or is `root`."""
    members = {m.op for m in src.members}
    return all(
        use in members or use is root
        for m in src.members
        for result in m.op.results
        for use in view_uses(result)
    )
