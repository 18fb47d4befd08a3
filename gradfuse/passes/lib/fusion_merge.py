"""Merging groups for `tg-fuse`: two elementwise groups (`fusion.Planner.elementwise`),
a one-element group into the op that alone reads it (`absorb_scalar`), and the
bookkeeping that a group taking another's ops needs (`take_over`, also for a
reduction's prologue, `fusion.Planner.absorb`).

An elementwise op that reads two independent elementwise kernels at its own point
joins one of them; the other merges into it, so that no temporary is stored between
them. Adam's update of one param is one kernel, not four:

    m = m_buf * b1 + g * (1 - b1)      // m_buf * b1: one group; g * (1 - b1): another
    // the add joins the first and the second merges into it

A one-element elementwise group that only one op reads (a dropout's key,
`rng * 3 + counter`, read by its `tg.random`) is recomputed by that op's kernel at each
point: a few scalar operations instead of a launch of its own, and no barrier between
the launches before and after it (`kernel-fuse-rows` cannot run it row by row).
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.ir import Operation
from xdsl.ir.affine import AffineExpr, AffineMap

from gradfuse import affine
from gradfuse.dialects import tg
from gradfuse.passes.lib.fusion_graph import (
    SHAPED,
    Group,
    look_through,
    private_to,
    resolve,
    shape_of,
)

if TYPE_CHECKING:
    from gradfuse.passes.lib.fusion import Planner


def plain(g: Group) -> bool:
    """Whether g's members are plain elementwise ops, each at g's own point: no
    view-shaped op (a concat, a pad), no scatter or fill, nothing in a prologue."""
    ident = affine.identity_map(len(g.domain))
    return not any(
        m.map != ident or m.prologue or m.fill or isinstance(m.op, (*SHAPED, tg.ScatterAddOp))
        for m in g.members
    )


def mergeable(planner: Planner, g: Group, h: Group, op: Operation, shape: tuple[int, ...]) -> bool:
    """Whether elementwise group h may merge into g, the group `op` joins: h is a plain
    elementwise kernel over `shape` that `op` reads at its own point, neither of the
    two depends on the other, and no other kernel that `op` reads depends on h (g runs
    after those once `op` joins it: with h's ops in g, such a kernel would both follow
    and precede g, a cycle; two `x[i] += v` on one tensor made one)."""
    if h.kind != "elementwise" or h.domain != shape or h.id < planner.first_after_barrier:
        return False
    if not plain(h):
        return False
    refs = [v for v in op.operands if planner.producer(v) is h]
    others = {planner.producer(v) for v in op.operands} - {g, h, None}
    return all(planner.available(h, v, shape) for v in refs) and not (
        planner.reaches(g, h) or planner.reaches(h, g) or planner.reaches(others, h)  # type: ignore[arg-type]
    )


SCALAR_OPS = 8
"""The most ops a one-element group may have and still be recomputed at every point."""


def absorb_scalar(planner: Planner, g: Group, op: Operation) -> None:
    """Moves into g, the group `op` joins, each one-element elementwise group that
    `op` alone reads (at most `SCALAR_OPS` plain ops whose params no later op writes):
    g computes it again at each of its points."""
    for value in op.operands:
        base, _, guard = look_through(value)
        src = planner.producer(base)
        if (
            not isinstance(src, Group)
            or src is g
            or guard is not None
            or src.kind != "elementwise"
            or src.ordered
            or prod(src.domain) != 1
            or len(src.members) > SCALAR_OPS
            or src.id < planner.first_after_barrier
            or not private_to(src, op)
            or not plain(src)
            or any(
                m.views or isinstance(m.op, tg.AssignOp) or _rewritten(planner, m.op)
                for m in src.members
            )
        ):
            continue
        planner.groups.remove(src)
        zero = AffineExpr.constant(0)
        for m in src.members:  # the one point of its result (tensor<f32> or <1x1xf32>)
            at = AffineMap(g.parallel, 0, (zero,) * len(shape_of(m.op.results[0])))
            g.members.append(type(m)(m.op, at))
            planner.node_of[m.op] = g
        take_over(planner, g, src)


def _rewritten(planner: Planner, op: Operation) -> bool:
    """Whether `op` reads a param that a later op (already planned) writes."""
    for v in op.operands:
        param = resolve(v)[0].owner
        if isinstance(param, tg.ParamOp):
            epoch = planner.epoch.get(param, 0)
            if epoch < len(planner.writers.get(param.key.data, [])):
                return True
    return False


def merge(planner: Planner, g: Group, h: Group) -> None:
    """Moves h's members into g (vertical fusion of two independent elementwise
    kernels that one op reads at the same point: Adam's `m * b1 + g * (1 - b1)` reads
    the moment and the gradient's kernel, which then is one kernel and no temporary)."""
    planner.groups.remove(h)
    for m in h.members:
        g.members.append(m)
        planner.node_of[m.op] = g
    take_over(planner, g, h)


def take_over(planner: Planner, g: Group, src: Group) -> None:
    """g, which now holds src's ops, takes src's edges and its places among the
    readers and writers of params (src is no longer a node)."""
    for user in list(src.users):
        planner.unlink(user, src)
        planner.link(user, g)
    for dep in list(src.deps):
        planner.unlink(src, dep)
        planner.link(g, dep, ordering=src.ordered)
    for readers in planner.readers.values():
        if src in readers:
            readers.discard(src)
            readers.add(g)
    for writers in planner.writers.values():
        writers[:] = [g if w is src else w for w in writers]
