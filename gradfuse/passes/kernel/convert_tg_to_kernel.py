"""`convert-tg-to-kernel`: writes out `tg-fuse`'s decisions; tensors become buffers.

Every function becomes host code over buffers (`kernel.param`, `kernel.alloc`,
`kernel.feed`, `kernel.for`, ...) around one `kernel.kernel` per `tg.fusion`, a
`kernel.group` for fusions that share a launch. Nothing is decided here: the
groups, their maps, what they store and the launch order are the `tg.fusion`s'.

    %h = "tg.fusion"() <{kind = "contraction", domain = array<i64: 2, 4, 8>, ...}> ({
      %y = "tg.dot"(%x, %w) {fuse.operand_maps = [...]} : ... -> tensor<2x4xf32>
      %h = "tg.add"(%y, %b2) : ... -> tensor<2x4xf32>
      "tg.fusion_yield"(%h) : (tensor<2x4xf32>) -> ()
    }) : () -> tensor<2x4xf32>
    // becomes
    %h = kernel.alloc : memref<2x4xf32>
    "kernel.kernel"(%x, %w, %b, %h) <{sym_name = "k0", kind = "contraction", ...}> (...)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.passes.lib.fusion_graph import Group, Member, inner, look_through, resolve
from gradfuse.passes.lib.kernel_body import KernelBody

HOST_OPS = (tg.FeederOp, tg.ReceiverOp, tg.AllReduceOp, tg.ForOp, tg.YieldOp, func.ReturnOp)

MAX_GROUP = 64
"""At most this many kernels share one launch (horizontal fusion)."""


@lru_cache(maxsize=4096)
def memref_of(ty: Attribute) -> MemRefType:
    """The buffer type of a tensor type: `tensor<2x4xf32>` -> `memref<2x4xf32>`."""
    assert isinstance(ty, TensorType)
    return MemRefType(ty.element_type, ty.get_shape())


@dataclass(frozen=True)
class ConvertTgToKernelPass(ModulePass):
    """Turns every function's `tg.fusion`s into kernels over buffers (after `tg-fuse`).

    `ir-opt model.tg -p tg-fuse,convert-tg-to-kernel -t kernels`
    """

    name = "convert-tg-to-kernel"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        look_through.cache_clear()  # views are looked through once per run
        names = itertools.count()
        for f in list(op.ops):
            if isinstance(f, func.FuncOp):
                _FunctionFuser(f, names).run()
        look_through.cache_clear()


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
        """Params and dense constants become buffers at the function's entry: every param
        read, and every param assigned that nothing reads any more (its `tg.param`, read
        only to declare it, was dead code: `p * 2` unused, then `p.assign(...)`)."""
        ops = list(old.walk())
        inits = {op.key.data: op.init for op in ops if isinstance(op, tg.ParamOp) and op.init}
        for op in ops:
            if isinstance(op, tg.ParamOp | tg.AssignOp):
                key = op.key.data
                if key not in self.params:
                    ty = op.result.type if isinstance(op, tg.ParamOp) else op.value.type
                    p = K.ParamOp(key, memref_of(ty), inits.get(key))
                    p.location = op.location
                    p.result.name_hint = _hint(key)
                    entry.add_op(p)
                    self.params[key] = p.result
                if isinstance(op, tg.ParamOp):
                    self.buffers[op.result] = self.params[key]
            elif isinstance(op, tg.ConstantOp) and (not op.is_splat or _read_padded(op.result)):
                c = K.ConstantOp(op.value, memref_of(op.result.type))
                c.location = op.location
                entry.add_op(c)
                self.buffers[op.result] = c.result

    # --- host code --------------------------------------------------------------------

    def block(self, old: Block, new: Block) -> None:
        """Host ops in order; the fusions with one launch number are one launch (views,
        params and constants between them are no host code)."""
        launch: list[tg.FusionOp] = []
        for op in old.ops:
            if isinstance(op, tg.FusionOp):
                if launch and launch[0].launch != op.launch:
                    self.launch(launch, new)
                    launch = []
                launch.append(op)
                continue
            if not isinstance(op, HOST_OPS):
                continue
            if launch:
                self.launch(launch, new)
                launch = []
            self.host(op, new)
        if launch:
            self.launch(launch, new)

    def launch(self, fusions: list[tg.FusionOp], new: Block) -> None:
        kernels = [self.kernel(f, new) for f in fusions]
        for start in range(0, len(kernels), MAX_GROUP):
            chunk = kernels[start : start + MAX_GROUP]
            if len(chunk) == 1:
                new.add_op(chunk[0])
            else:
                group = K.GroupOp(f"g{next(self.names)}", chunk)
                group.location = chunk[0].location
                new.add_op(group)

    def host(self, op: Operation, new: Block) -> None:
        """The host op over buffers that `op` becomes, at its location (a loop body's
        `tg.yield` becomes the `kernel.yield` added after the body)."""
        host: Operation
        if isinstance(op, tg.FeederOp):
            host = K.FeedOp(op.key.data, self.alloc(op.result, new))
        elif isinstance(op, tg.ReceiverOp):
            host = K.ReceiveOp(op.key.data, [self.materialized(v, new) for v in op.inputs])
        elif isinstance(op, tg.AllReduceOp):
            source = self.materialized(op.input, new)
            host = K.AllReduceOp(op.reduce.data, source, self.alloc(op.result, new))
        elif isinstance(op, tg.ForOp):
            host = K.ForOp(*op.bounds)
        elif isinstance(op, func.ReturnOp):
            host = func.ReturnOp(*[self.materialized(v, new) for v in op.arguments])
        else:
            return
        host.location = op.location
        new.add_op(host)
        if isinstance(op, tg.ForOp) and isinstance(host, K.ForOp):
            self.block(op.body.block, host.body.block)
            host.body.block.add_op(K.YieldOp())

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
        value = inner(value)
        if value in self.buffers:  # stored laid out by the kernel that made it
            return self.buffers[value]
        base, vmap, guard = look_through(value)
        shape = shape_of(value)
        plain = vmap == affine.identity_map(len(shape)) and shape_of(base) == shape
        if base in self.buffers and plain and guard is None:
            return self.buffers[base]
        g = Group(-1, "elementwise", shape, len(shape))
        out = K.AllocOp(memref_of(value.type))
        new.add_op(out)
        body = KernelBody(self, g, new)
        body.store(body.operand(value, affine.identity_map(len(shape)), prologue=False), out.result)
        new.add_op(body.finish(f"k{next(self.names)}", value.owner))
        return out.result

    # --- kernels ----------------------------------------------------------------------

    def kernel(self, f: tg.FusionOp, new: Block) -> K.KernelOp:
        g = self.group(f)
        body = KernelBody(self, g, new)
        for m in g.members:
            body.member(m)
        root = next((m.op for m in g.members if m.operand_maps), g.members[-1].op)
        return body.finish(f"k{next(self.names)}", root)

    def group(self, f: tg.FusionOp) -> Group:
        """The group a fusion holds: its members, maps, stores and zero-filled buffers."""
        domain = f.domain_sizes
        g = Group(-1, f.kind.data, domain, f.parallel.value.data)
        yields = list(f.terminator.values)
        zeros = iter(f.zeros)
        for op in f.members():
            if isinstance(op, tg.ConstantOp):  # a fill: zeros for a later scatter_add
                g.members.append(Member(op, affine.identity_map(len(domain)), fill=True))
                continue
            map, prologue, operand_maps = f.member_maps(op)
            m = Member(op, map, prologue, operand_maps)
            if isinstance(op, tg.ScatterAddOp):  # adds into the buffer its fill zeroed
                self.buffers[op.result] = self.buffers[inner(next(zeros))]
            elif op.results:
                value = op.results[0]
                m.stored = value in yields
                m.views = [
                    y
                    for y in yields
                    if isinstance(y.owner, tg.ViewAccessOp) and resolve(y)[0] is value
                ]
            g.members.append(m)
        return g


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
