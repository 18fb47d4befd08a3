"""`tg-fuse`: forms fused kernels and turns tensors into buffers.

`fusion.Planner` decides the groups (vertical, reduction/contraction prologue
and epilogue, in-place updates) and `plan_levels` the launches (horizontal
fusion). This pass writes them out: every function becomes host code over
buffers (`kernel.param`, `kernel.alloc`, `kernel.feed`, ...) around one
`kernel.kernel` (or `kernel.group`) per launch:

    %y = tg.dot %x, %w : tensor<2x4xf32>
    %z = tg.add %y, %b2 : tensor<2x4xf32>    // b2 = tg.view of a bias
    // becomes one contraction kernel with the add as its epilogue
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    MemRefType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.passes.fusion import Planner
from gradfuse.passes.fusion_graph import Group, Host, resolve, resolve_guard
from gradfuse.passes.fusion_levels import plan_levels
from gradfuse.passes.kernel_body import KernelBody

MAX_GROUP = 64
"""At most this many kernels share one launch (horizontal fusion)."""


@lru_cache(maxsize=4096)
def memref_of(ty: Attribute) -> MemRefType:
    """The buffer type of a tensor type: `tensor<2x4xf32>` -> `memref<2x4xf32>`."""
    assert isinstance(ty, TensorType)
    return MemRefType(ty.element_type, ty.get_shape())


@dataclass(frozen=True)
class TgFusePass(ModulePass):
    """Fuses every function's tg ops into kernels over buffers."""

    name = "tg-fuse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        resolve.cache_clear()  # views are looked through once per run
        resolve_guard.cache_clear()
        names = itertools.count()
        for f in list(op.ops):
            if isinstance(f, func.FuncOp):
                _FunctionFuser(f, names).run()
        resolve.cache_clear()
        resolve_guard.cache_clear()


class _FunctionFuser:
    def __init__(self, f: func.FuncOp, names: itertools.count):
        self.f, self.names = f, names
        self.buffers: dict[SSAValue, SSAValue] = {}
        self.params: dict[str, SSAValue] = {}

    def run(self) -> None:
        old = self.f.body.block
        entry = Block(arg_types=[memref_of(a.type) for a in old.args])
        for a, b in zip(old.args, entry.args):
            self.buffers[a] = b
            b.name_hint = a.name_hint
        self.hoist(old, entry)
        self.block(old, entry)
        outs = [memref_of(t) for t in self.f.function_type.outputs]
        new = func.FuncOp(self.f.sym_name.data, ([a.type for a in entry.args], outs), Region(entry))
        new.location = self.f.location
        parent = self.f.parent
        assert parent is not None
        parent.insert_op_before(new, self.f)
        parent.detach_op(self.f)

    def hoist(self, old: Block, entry: Block) -> None:
        """Params and dense constants become buffers at the function's entry."""
        ops = list(old.walk())
        inits = {op.key.data: op.init for op in ops if isinstance(op, tg.ParamOp) and op.init}
        for op in ops:
            if isinstance(op, tg.ParamOp):
                key = op.key.data
                if key not in self.params:
                    p = K.ParamOp(key, memref_of(op.result.type), inits.get(key))
                    p.location = op.location
                    p.result.name_hint = _hint(key)
                    entry.add_op(p)
                    self.params[key] = p.result
                self.buffers[op.result] = self.params[key]
            elif isinstance(op, tg.ConstantOp) and (not op.is_splat or _read_padded(op.result)):
                c = K.ConstantOp(op.value, memref_of(op.result.type))
                c.location = op.location
                entry.add_op(c)
                self.buffers[op.result] = c.result

    # --- host code --------------------------------------------------------------------

    def block(self, old: Block, new: Block) -> None:
        planner = Planner(old).plan()
        order = {op: i for i, op in enumerate(old.ops)}
        for level in plan_levels(planner):
            hosts = sorted((n for n in level if isinstance(n, Host)), key=lambda h: order[h.op])
            for h in hosts:
                self.host(h.op, new)
            kernels = [self.kernel(g, new) for g in level if isinstance(g, Group)]
            for start in range(0, len(kernels), MAX_GROUP):
                chunk = kernels[start : start + MAX_GROUP]
                if len(chunk) == 1:
                    new.add_op(chunk[0])
                else:
                    group = K.GroupOp(f"g{next(self.names)}", chunk)
                    group.location = chunk[0].location
                    new.add_op(group)

    def host(self, op: Operation, new: Block) -> None:
        if isinstance(op, tg.FeederOp):
            buf = self.alloc(op.result, new)
            feed = K.FeedOp(op.key.data, buf)
            feed.location = op.location
            new.add_op(feed)
        elif isinstance(op, tg.ReceiverOp):
            bufs = [self.materialized(v, new) for v in op.inputs]
            recv = K.ReceiveOp(op.key.data, bufs)
            recv.location = op.location
            new.add_op(recv)
        elif isinstance(op, tg.ForOp):
            loop = K.ForOp(op.lower.value.data, op.upper.value.data, op.step.value.data)
            loop.location = op.location
            new.add_op(loop)
            self.block(op.body.block, loop.body.block)
            loop.body.block.add_op(K.YieldOp())
        elif isinstance(op, func.ReturnOp):
            ret = func.ReturnOp(*[self.materialized(v, new) for v in op.arguments])
            ret.location = op.location
            new.add_op(ret)

    def alloc(self, value: SSAValue, new: Block) -> SSAValue:
        if value not in self.buffers:
            a = K.AllocOp.create(result_types=[memref_of(value.type)])
            if value.name_hint:
                a.result.name_hint = value.name_hint
            new.add_op(a)
            self.buffers[value] = a.result
        return self.buffers[value]

    def materialized(self, value: SSAValue, new: Block) -> SSAValue:
        """A buffer holding `value` laid out plainly (a copy kernel for views and splats)."""
        if value in self.buffers:  # stored laid out by the kernel that made it
            return self.buffers[value]
        base, vmap = resolve(value)
        shape = shape_of(value)
        plain = vmap == affine.identity_map(len(shape)) and shape_of(base) == shape
        if base in self.buffers and plain and resolve_guard(value) is None:
            return self.buffers[base]
        g = Group(-1, "elementwise", shape, len(shape))
        out = K.AllocOp(memref_of(value.type))
        new.add_op(out)
        body = KernelBody(self, g, new)
        body.store(body.operand(value, affine.identity_map(len(shape)), prologue=False), out.result)
        new.add_op(body.finish(f"k{next(self.names)}", value.owner))
        return out.result

    # --- kernels ----------------------------------------------------------------------

    def kernel(self, g: Group, new: Block) -> K.KernelOp:
        body = KernelBody(self, g, new)
        for m in g.members:
            body.member(m)
        root = next((m.op for m in g.members if m.operand_maps), g.members[-1].op)
        return body.finish(f"k{next(self.names)}", root)


def _read_padded(value: SSAValue) -> bool:
    """Whether some op reads `value` through a guarded view (so it needs a buffer)."""
    for use in value.uses:
        view = use.operation
        if isinstance(view, tg.ViewAccessOp):
            if view.guard is not None or _read_padded(view.result):
                return True
    return False


def _hint(key: str) -> str | None:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
    return name if SSAValue.is_valid_name(name) else None
