"""`tg-fuse`: decides which tg ops share a kernel, and in which order kernels launch.

`fusion.Planner` decides the groups (vertical, reduction/contraction prologue and
epilogue, in-place updates) and `plan_levels` the launches (horizontal fusion). This
pass writes the decisions into the IR and nothing else: each group's ops move into
a `tg.fusion` region (see `dialects/tg_fusion.py`) that yields what the kernel stores,
placed in launch order among the host ops; `convert-tg-to-kernel` then writes them out.

    %y = tg.dot %x, %w : tensor<2x4xf32>
    %z = tg.add %y, %b2 : tensor<2x4xf32>    // b2 = tg.view of a bias
    // becomes
    %z = "tg.fusion"() <{kind = "contraction", domain = array<i64: 2, 4, 8>, ...}> ({
      %y = "tg.dot"(%x, %w) {fuse.operand_maps = [...]} : ... -> tensor<2x4xf32>
      %z = "tg.add"(%y, %b2) : ... -> tensor<2x4xf32>
      "tg.fusion_yield"(%z) : (tensor<2x4xf32>) -> ()
    }) : () -> tensor<2x4xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gradfuse.dialects import tg
from gradfuse.dialects.tg_fusion import annotate
from gradfuse.passes.lib.fusion import Planner
from gradfuse.passes.lib.fusion_graph import (
    HOST_READS,
    Group,
    Host,
    Node,
    look_through,
    resolve,
    stores,
)
from gradfuse.passes.lib.fusion_levels import plan_levels


@dataclass(frozen=True)
class TgFusePass(ModulePass):
    """Groups every function's tg ops into `tg.fusion`s, in launch order.

    `ir-opt model.tg -p tg-fuse -t mlir` prints the decisions."""

    name = "tg-fuse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        look_through.cache_clear()  # views are looked through once per run
        for f in list(op.ops):
            if isinstance(f, func.FuncOp):
                plans: dict[Block, list[list[Node]]] = {}
                _decide(f.body.block, plans)  # every block's, before the IR changes
                _Former(plans).block(f.body.block)
        look_through.cache_clear()


def _decide(block: Block, plans: dict[Block, list[list[Node]]]) -> None:
    """The launch levels of `block` and of the loops in it, with what each group stores."""
    levels = plan_levels(Planner(block).plan())
    plans[block] = levels
    for level in levels:
        for node in level:
            if isinstance(node, Group):
                stores(node)
    for op in block.ops:
        if isinstance(op, tg.ForOp):
            _decide(op.body.block, plans)


class _Former:
    """Rebuilds a block in launch order: per level its host ops, then its fusions.

    Params and constants keep their order (between the loops they were between);
    views outside fusions follow the value they read; a view of a fusion's own value
    that its members read is cloned into it."""

    def __init__(self, plans: dict[Block, list[list[Node]]]):
        self.plans = plans
        self.zeros: dict[Operation, SSAValue] = {}  # scatter_add -> its fill's zeros
        self.launches = 0

    def block(self, block: Block) -> None:
        levels = self.plans[block]
        old = list(block.ops)
        placed = {n.op for lv in levels for n in lv if isinstance(n, Host)}
        members = [m for lv in levels for n in lv if isinstance(n, Group) for m in n.members]
        placed |= {m.op for m in members}
        absorbed = [
            u.operation for m in members if m.into is not None for u in m.op.results[0].uses
        ]
        absorbed += [u.operation for add in absorbed for u in add.results[0].uses]
        sections: list[list[Operation]] = [[]]  # params and constants, between loops
        self.waiting: dict[SSAValue, list[tg.ViewAccessOp]] = {}
        ready: list[tg.ViewAccessOp] = []
        mine = set(old)
        for op in old:
            if isinstance(op, tg.ForOp):
                sections.append([])
            elif isinstance(op, tg.ViewAccessOp):
                source = op.input.owner
                if isinstance(source, Operation) and source in mine:
                    self.waiting.setdefault(op.input, []).append(op)
                else:
                    ready.append(op)
            elif op not in placed and op not in absorbed:
                sections[-1].append(op)
            op.detach()
        for op in reversed(absorbed):  # the assign, then the add: the scatter adds in place
            op.erase()
        self.out = block
        section = iter(sections)
        self.emit(*next(section), *ready)
        order = {op: i for i, op in enumerate(old)}
        for level in levels:
            hosts = sorted((n.op for n in level if isinstance(n, Host)), key=order.__getitem__)
            for host in hosts:
                self.emit(host)
                if isinstance(host, tg.ForOp):
                    waiting = self.waiting
                    self.block(host.body.block)
                    self.out, self.waiting = block, waiting
                    self.emit(*next(section))
            groups = [n for n in level if isinstance(n, Group)]
            for g in groups:
                self.emit(self.fusion(g))
            self.launches += bool(groups)
        for op in reversed(list(block.ops)):  # views no one reads any more
            if isinstance(op, tg.ViewAccessOp) and not op.result.uses:
                block.erase_op(op)
        unread = [v for views in self.waiting.values() for v in views]
        for view in sorted(unread, key=order.__getitem__, reverse=True):
            assert not view.result.uses, "tg-fuse: a view of a value no kernel stores is read"
            view.erase()  # a view of a value only its fusion has (its copy is inside)

    def emit(self, *ops: Operation) -> None:
        """Appends `ops`, then the views waiting for their results."""
        for op in ops:
            self.out.add_op(op)
            for r in op.results:
                self.emit(*self.waiting.pop(r, []))

    def fusion(self, g: Group) -> tg.FusionOp:
        body = Block()
        local: dict[SSAValue, SSAValue] = {}
        bases = {r for m in g.members if not m.fill for r in m.op.results}

        def inside(value: SSAValue) -> SSAValue:
            """`value`, or a clone inside of the view chain it is over a value of g."""
            view = value.owner
            if not isinstance(view, tg.ViewAccessOp) or resolve(value)[0] not in bases:
                return value
            if value not in local:
                clone = view.clone()
                clone.operands = (inside(view.input),)
                clone.result.name_hint = value.name_hint
                body.add_op(clone)
                local[value] = clone.result
            return local[value]

        yields: list[SSAValue] = []
        zeros: list[SSAValue] = []
        copies: list[tuple[SSAValue, int]] = []  # a view a host op reads: its kernel stores it
        fill: Operation | None = None
        for m in g.members:
            op = m.op
            if m.fill:
                assert isinstance(op.results[0].type, TensorType)
                zero = tg.ConstantOp(0.0, op.results[0].type)
                zero.location = op.location
                zero.result.name_hint = op.results[0].name_hint
                body.add_op(zero)
                yields.append(zero.result)
                fill = op
                continue
            op.operands = tuple(inside(v) for v in op.operands)
            sizes = len(g.domain) if m.prologue else g.parallel
            annotate(op, m.map, m.prologue, m.operand_maps, sizes)
            body.add_op(op)
            if isinstance(op, tg.ScatterAddOp):
                zeros.append(self.zeros.pop(op) if m.into is None else m.into)
                yields.append(op.result)
            elif m.stored:
                yields.append(op.results[0])
            for view in m.views:
                copies.append((view, len(yields)))
                yields.append(inside(view))
        body.add_op(tg.FusionYieldOp(yields))
        f = tg.FusionOp(g.kind, g.domain, g.parallel, self.launches, body, zeros)
        f.location = g.members[-1].op.location
        if fill is not None:
            self.zeros[fill] = f.outs[0]
        for value, result in zip(yields, f.outs):
            if value.owner.parent is body and value not in local.values():
                value.replace_uses_with_if(result, lambda use: not f.is_ancestor(use.operation))
                result.name_hint = None  # the name stays inside, with the buffer it names
                self.waiting[result] = self.waiting.pop(value, [])
        for view, index in copies:
            copy = f.outs[index]
            view.replace_uses_with_if(copy, lambda use: isinstance(use.operation, HOST_READS))
            copy.name_hint = None
        return f
