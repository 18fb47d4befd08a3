"""Launch levels for `tg-fuse`: groups with no path between them share a launch.

`plan_levels(planner)` places every node at its earliest level (ASAP), then moves
each group as late as its users allow onto a level that already has groups, so
that independent kernels (every optimizer update of a step) become one launch:

    levels = plan_levels(Planner(block).plan())   # [[feed x], [k0, k1], [g: k2, k3]]
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from gradfuse.passes.lib.fusion_graph import Node

if TYPE_CHECKING:
    from gradfuse.passes.lib.fusion import Planner


def plan_levels(planner: Planner) -> list[list[Node]]:
    """Nodes by level: each level's groups are one launch, after its host ops."""
    nodes = planner.nodes()
    level: dict[int, int] = {}

    def asap(n: Node) -> int:
        if id(n) not in level:
            level[id(n)] = 1 + max((asap(d) for d in n.deps), default=-1)
        return level[id(n)]

    for n in nodes:
        asap(n)
    # Sink groups move later to share a launch with others (ALAP within their slack).
    group_levels = sorted({level[id(g)] for g in planner.groups})
    top = max(level.values(), default=0)
    for g in sorted(planner.groups, key=lambda g: -level[id(g)]):
        latest = min((level[id(u)] - 1 for u in g.users), default=top)
        best = group_levels[bisect.bisect_right(group_levels, latest) - 1] if group_levels else -1
        if best > level[id(g)]:
            level[id(g)] = best
    out: list[list[Node]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for n in nodes:
        out[level[id(n)]].append(n)
    return [lv for lv in out if lv]
