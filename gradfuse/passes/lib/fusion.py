"""Fusion decisions for `tg-fuse`: which tg ops share a kernel, and in which order.

A `Group` is one future kernel: a domain (parallel dims, then reduction dims)
and its member ops, each evaluated at an affine map from the domain (prologue)
or the parallel dims (epilogue) to the op's own indices. The rules:

- an elementwise op joins the group of an operand it reads at the same point
  (vertical fusion, and the epilogue of a reduction or contraction); the plain
  elementwise groups of its other operands read at that point merge into it where
  neither depends on the other (Adam's moment and gradient kernels: one kernel);
- a reduction or contraction starts a group and pulls in the elementwise groups
  only it consumes (its prologue): nothing expensive is ever recomputed;
- `tg.assign` joins the group computing its value (an in-place update) unless a
  reader of the old value would then run too late; param reads and writes get
  read-after-write and write-after-read edges;
- `fusion_levels.plan_levels` then puts groups with no path between them on one level: one
  launch (horizontal fusion), as all the optimizer updates of a step.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.dialects import func
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineMap

from gradfuse import affine
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ints, shape_of
from gradfuse.passes.lib.fusion_graph import (
    ELEMENTWISE,
    HOST,
    NOT_FUSED,
    SHAPED,
    Group,
    Host,
    Member,
    Node,
    accumulation,
    bijective,
    first_op,
    look_through,
    not_lowered,
    one_to_one,
    private_to,
    reads_own_point,
    resolve,
    uniform,
    unit_join,
)
from gradfuse.passes.lib.fusion_merge import absorb_scalar, merge, mergeable, plain, take_over


class Planner:
    """Forms the groups and host nodes of one block, with every ordering edge."""

    def __init__(self, block: Block):
        self.block = block
        self.groups: list[Group] = []
        self.hosts: list[Host] = []
        self.node_of: dict[Operation, Node] = {}
        self.writers: dict[str, list[Node]] = {}  # key -> writers in program order
        self.epoch: dict[Operation, int] = {}  # tg.param -> number of writes before it
        self.readers: dict[tuple[str, int], set[Node]] = {}
        self.last_effect: Node | None = None
        self.barrier: Node | None = None
        self.counter = 0
        self.first_after_barrier = 0  # groups with a smaller id run before the last loop
        self.into: dict[Operation, tuple[SSAValue, tg.AddOp, tg.AssignOp]] = {}

    # --- the graph -------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        return [*self.groups, *self.hosts]

    def producer(self, value: SSAValue) -> Node | None:
        owner = resolve(value)[0].owner  # the op behind any views
        return self.node_of.get(owner) if isinstance(owner, Operation) else None

    def link(self, node: Node, dep: Node, ordering: bool = False) -> None:
        """Makes `node` run after `dep`."""
        if dep is node:
            return
        node.ordered |= ordering
        if dep in node.deps:
            return
        node.deps.add(dep)
        dep.users.add(node)
        stack = [(node, dep.level + 1)]
        while stack:
            n, level = stack.pop()
            if n is dep:  # dep already runs after node: a planning error, not a hang
                where = position_of(first_op(node).location)
                raise GradfuseError("tg-fuse: internal error: two kernels wait for each other", where)
            if n.level < level:
                n.level = level
                stack.extend((u, level + 1) for u in n.users)

    def unlink(self, node: Node, dep: Node) -> None:
        node.deps.discard(dep)
        dep.users.discard(node)

    def reaches(self, start: Node | Iterable[Node], target: Node) -> bool:
        """Whether `start` (or any of several starts) transitively depends on `target`."""
        stack = [start] if isinstance(start, Node) else [n for n in start if n is not target]
        seen: set[int] = set()
        while stack:
            node = stack.pop()
            if node is target:
                return True
            if node.level > target.level and id(node) not in seen:
                seen.add(id(node))
                stack.extend(node.deps)
        return False

    def new_group(self, kind: str, domain, parallel: int) -> Group:
        g = Group(self.counter, kind, tuple(domain), parallel)
        self.counter += 1
        if self.barrier is not None:
            self.link(g, self.barrier)  # (every later group has it: no constraint on fusing)
        self.groups.append(g)
        return g

    def add(self, node: Node, member: Member | None = None) -> None:
        op = member.op if member else node.op  # type: ignore[attr-defined]
        if member is not None:
            node.members.append(member)  # type: ignore[attr-defined]
        self.node_of[op] = node
        for operand in op.operands:
            producer = self.producer(operand)
            if producer is not None:
                self.link(node, producer)
            self.read_params(node, resolve(operand)[0])

    def read_params(self, node: Node, base: SSAValue) -> None:
        """Orders `node` after the write it reads and before the next one."""
        param = base.owner
        if not isinstance(param, tg.ParamOp):
            return
        key, epoch = param.key.data, self.epoch.get(param)
        if epoch is None:  # read before the loop whose body this block is
            if any(isinstance(o, tg.AssignOp) and o.key.data == key for o in self.block.walk()):
                raise GradfuseError(
                    f'tg-fuse: param "{key}" is read before a loop that overwrites it:'
                    " read it with tg.param inside the loop",
                    position_of(param.location),
                )
            epoch = 0
        writers = self.writers.get(key, [])
        if epoch > 0:
            self.link(node, writers[epoch - 1], ordering=True)
        if epoch < len(writers):  # read after the next write was planned
            later = writers[epoch]
            if later is not node and self.reaches(node, later):
                raise GradfuseError(
                    f'tg-fuse: the old value of param "{key}" is read after it was overwritten',
                    position_of(param.location),
                )
            self.link(later, node, ordering=True)
        self.readers.setdefault((key, epoch), set()).add(node)

    # --- planning ----------------------------------------------------------------------

    def plan(self) -> Planner:
        for op in self.block.ops:
            if isinstance(op, tg.ScatterAddOp) and (found := accumulation(op)) is not None:
                self.into[op] = found
        absorbed = {o for _, add, assign in self.into.values() for o in (add, assign)}
        for op in self.block.ops:
            if op in absorbed:
                continue
            if isinstance(op, tg.ParamOp):
                self.epoch[op] = len(self.writers.get(op.key.data, []))
            elif isinstance(op, NOT_FUSED):
                raise not_lowered(op)
            elif isinstance(op, ELEMENTWISE):
                self.elementwise(op)
            elif isinstance(op, tg.ScatterAddOp):
                self.scatter(op)
            elif isinstance(op, tg.ReduceOp):
                self.reduction(op)
            elif isinstance(op, tg.DotOp):
                self.contraction(op)
            elif isinstance(op, SHAPED):
                shape = shape_of(op.results[0])
                g = self.new_group("elementwise", shape, len(shape))
                self.add(g, Member(op, affine.identity_map(len(shape))))
            elif isinstance(op, tg.AssignOp):
                self.assign(op)
            elif isinstance(op, HOST):
                self.host(op)
        return self

    def host(self, op: Operation) -> None:
        if isinstance(op, tg.ForOp) and op.inits:
            raise GradfuseError(
                "tg-fuse: run tg-loop-state first (this loop carries tensors)",
                position_of(op.location),
            )
        node = Host(op)
        if self.barrier is not None:
            self.link(node, self.barrier, ordering=True)
        if isinstance(op, tg.FeederOp | tg.ReceiverOp | tg.AllReduceOp | tg.ForOp):
            if self.last_effect is not None:
                self.link(node, self.last_effect, ordering=True)
            self.last_effect = node
        if isinstance(op, tg.ForOp | func.ReturnOp | tg.YieldOp):
            for other in self.nodes():
                self.link(node, other, ordering=True)
        if isinstance(op, tg.ForOp):
            self.barrier, self.first_after_barrier = node, self.counter
            for inner_op in op.body.walk():  # the params its body reads from this block
                for v in inner_op.operands:
                    if isinstance(v.owner, tg.ParamOp) and v.owner.parent_block() is self.block:
                        self.read_params(node, v)
        if isinstance(op, tg.ReceiverOp | tg.AllReduceOp | func.ReturnOp):
            for value in op.operands:
                self.store_as_view(value)
        self.hosts.append(node)
        self.add(node)

    def store_as_view(self, value: SSAValue) -> None:
        """A host op takes a one-to-one view of a kernel's value: let that kernel store
        the view itself (laid out plainly), instead of a copy kernel afterwards."""
        base, vmap = resolve(value)
        g = self.producer(base)
        shape = shape_of(value)
        if not isinstance(g, Group) or vmap == affine.identity_map(len(shape)):
            return
        member = g.member_of(base.owner)
        if member is not None and self.reindex_for(g, value, shape):
            member.views.append(value)

    def available(self, g: Group, value: SSAValue, shape: tuple[int, ...]) -> bool:
        """Whether g's epilogue has `value` at every point of `shape` (identity access)."""
        base, map, guard = look_through(value)
        if guard is not None:
            return False  # a padded read needs the value at other points too
        member = g.member_of(base.owner)
        if member is None or member.prologue or g.domain[: g.parallel] != shape:
            return False
        if isinstance(member.op, tg.ScatterAddOp):
            return False  # written by atomic adds: complete only after the launch
        return affine.simplify(map, shape) == affine.simplify(member.map, shape)

    def joinable(self, g: Group, op: Operation, shape: tuple[int, ...]) -> bool:
        if g.domain[: g.parallel] != shape or g.id < self.first_after_barrier:
            return False
        if isinstance(op, tg.GatherOp) and self.producer(op.input) is g:
            return False  # a gather reads anywhere in its input: it must be complete
        if isinstance(op, tg.ScatterAddOp) and g.kind != "elementwise" and not uniform(op.index):
            return False  # atomic adds to rows that vary: not a contraction's epilogue
        refs = [v for v in op.operands if self.producer(v) is g]
        if not all(self.available(g, v, shape) for v in refs):
            return False
        others = {self.producer(v) for v in op.operands} - {g, None}
        return not self.reaches(others, g)  # type: ignore[arg-type]

    def reindex(self, g: Group, op: Operation, shape: tuple[int, ...]) -> None:
        """Renumbers g's parallel dims for `op` (see `reindex_for`) by its first operand
        that reads a value of g through a one-to-one view."""
        for v in op.operands:
            if self.reindex_for(g, v, shape):
                return

    def reindex_for(self, g: Group, value: SSAValue, shape: tuple[int, ...]) -> bool:
        """Renumbers g's parallel dims so that `value`, a one-to-one view (a permutation,
        a reshape...) of a value of g, is at the same point as the new domain `shape`.
        Stored values keep their own layout (stores go through member maps), so this
        only changes the iteration order."""
        if any(isinstance(m.op, SHAPED) for m in g.members):
            return False
        old = g.domain[: g.parallel]
        base, vmap, guard = look_through(value)
        member = g.member_of(base.owner)
        if member is None or member.prologue or guard is not None or vmap.num_dims != len(shape):
            return False  # (a read of another rank: a broadcast, a random op's counter)
        vmap = affine.simplify(vmap.compose(affine.identity_map(len(shape))), shape)
        if member.map != affine.identity_map(len(old)) or not bijective(
            vmap, tuple(shape), tuple(old)
        ):
            return False
        n_new, red = len(shape), g.domain[g.parallel :]
        d = affine.dims(n_new + len(red))
        q = AffineMap(n_new + len(red), 0, (*vmap.results, *d[n_new:]))
        vpar = AffineMap(n_new, 0, vmap.results)
        for m in g.members:
            if m.operand_maps is not None:
                m.operand_maps = tuple(mp.compose(q) for mp in m.operand_maps)
            m.map = m.map.compose(q if m.prologue else vpar)
        g.domain, g.parallel = tuple(shape) + red, n_new
        return True

    def elementwise(self, op: Operation, shape: tuple[int, ...] | None = None) -> None:
        """Joins `op` (computed at every point of `shape`, its result's by default) to
        an operand's group, else starts a group."""
        shape = shape or shape_of(op.results[0])
        ident = affine.identity_map(len(shape))
        candidates = {self.producer(v) for v in op.operands}
        for g in sorted((c for c in candidates if isinstance(c, Group)), key=lambda c: -c.id):
            joins = g.domain[: g.parallel] == shape and self.joinable(g, op, shape)
            if not joins:
                self.reindex(g, op, shape)
                joins = self.joinable(g, op, shape)
            if joins:
                for h in candidates - {g}:
                    if isinstance(h, Group) and mergeable(self, g, h, op, shape):
                        merge(self, g, h)
                break
        else:
            g = self.new_group("elementwise", shape, len(shape))
        absorb_scalar(self, g, op)
        self.add(g, Member(op, ident))

    def assign(self, op: tg.AssignOp) -> None:
        shape = shape_of(op.value)
        key = op.key.data
        g = self.producer(op.value)
        before = self.after_of(key)
        at = self.assign_map(g, op, shape) if isinstance(g, Group) else None
        if at is None or self.reaches(before, g) or not reads_own_point(g, key, at):  # type: ignore[arg-type]
            g, at = (
                self.new_group("elementwise", shape, len(shape)),
                affine.identity_map(len(shape)),
            )
        assert isinstance(g, Group)
        self.add(g, Member(op, at))
        for reader in before:
            self.link(g, reader, ordering=True)
        self.writers.setdefault(key, []).append(g)

    def after_of(self, key: str) -> set[Node]:
        """What a new write of param `key` must follow: the reads of its current value
        and the write before it (two writes in one iteration, the second not reading
        the first: DDP's buffer broadcast, then a batch norm's update of them)."""
        writers = self.writers.get(key, [])
        return self.readers.get((key, len(writers)), set()) | set(writers[-1:])

    def assign_map(self, g: Group, op: tg.AssignOp, shape: tuple[int, ...]) -> AffineMap | None:
        """The map at which `op` joins g, the group computing its value (in place): the
        identity, or `unit_join`'s; else None."""
        if g.domain[: g.parallel] == shape:
            return affine.identity_map(len(shape)) if self.joinable(g, op, shape) else None
        return unit_join(g, op.value, shape) if g.id >= self.first_after_barrier else None

    def scatter(self, op: tg.ScatterAddOp) -> None:
        """Zeros first (a fill kernel), then the adds, fused with the source's kernel;
        or the adds straight into a param's buffer (see `accumulation`)."""
        if op in self.into:
            read, _, assign = self.into[op]
            self.elementwise(op, shape_of(op.src))
            g = self.node_of[op]
            g.member_of(op).into = read  # type: ignore[union-attr]
            key = assign.key.data
            for node in self.after_of(key):
                self.link(g, node, ordering=True)
            self.writers.setdefault(key, []).append(g)
            return
        out = shape_of(op.result)
        fill = self.new_group("elementwise", out, len(out))
        fill.members.append(Member(op, affine.identity_map(len(out)), fill=True))
        self.elementwise(op, shape_of(op.src))
        self.link(self.node_of[op], fill, ordering=True)

    def reduction(self, op: tg.ReduceOp) -> None:
        in_shape, dims = shape_of(op.input), ints(op.dims)
        kept = [i for i in range(len(in_shape)) if i not in dims]
        order = kept + list(dims)  # domain dim j walks input dim order[j]
        d = affine.dims(len(order))
        access = AffineMap(len(order), 0, tuple(d[order.index(i)] for i in range(len(in_shape))))
        g = self.new_group("reduction", [in_shape[i] for i in order], len(kept))
        self.absorb(g, op, [(op.input, access)])
        self.add(g, Member(op, affine.identity_map(len(kept)), operand_maps=(access,)))

    def contraction(self, op: tg.DotOp) -> None:
        a, b = shape_of(op.lhs), shape_of(op.rhs)
        n = len(a) - 2
        domain = [*a[:-1], b[-1], a[-1]]  # batch..., m, n, k
        d = affine.dims(len(domain))
        lhs = AffineMap(len(domain), 0, (*d[:n], d[n], d[n + 2]))
        rhs = AffineMap(len(domain), 0, (*d[:n], d[n + 2], d[n + 1]))
        g = self.new_group("contraction", domain, len(domain) - 1)
        self.absorb(g, op, [(op.lhs, lhs), (op.rhs, rhs)])
        self.add(g, Member(op, affine.identity_map(len(domain) - 1), operand_maps=(lhs, rhs)))

    def absorb(self, g: Group, root: Operation, inputs: list[tuple[SSAValue, AffineMap]]) -> None:
        """Pulls elementwise groups that only `root` consumes into g's prologue."""
        wanted: dict[Group, AffineMap | None] = {}
        for value, access in inputs:
            base, vmap, guard = look_through(value)
            if guard is not None:
                continue  # read through padding: outside the guard it is 0, not f(x)
            src = self.producer(base)
            if not isinstance(src, Group) or src.kind != "elementwise" or src.ordered:
                continue
            map = affine.simplify(vmap.compose(access), g.domain)
            ok = (
                (private_to(src, root) or one_to_one(map, g.domain, src.domain))
                and plain(src)
                and not any(isinstance(m.op, tg.AssignOp) for m in src.members)
            )
            wanted[src] = map if ok and wanted.get(src, map) == map else None
        for src, map in wanted.items():
            if map is None:
                continue
            self.groups.remove(src)
            for m in src.members:
                self.add(g, Member(m.op, map, prologue=True))
            take_over(self, g, src)
