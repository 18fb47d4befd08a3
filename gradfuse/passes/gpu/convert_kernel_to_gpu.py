"""`convert-kernel-to-gpu`: kernels become `gpu.func`s, the host program plain MLIR.

Each `kernel.kernel`, `kernel.group` or `kernel.rows` becomes a `gpu.func` in one
`gpu.module @gradfuse_kernels` (see `kernel_lowering`, `rows_lowering`) and a `gpu.launch_func` on the host;
the host ops become upstream ops that real `mlir-opt` accepts:

```
kernel.param "w" : memref<4x4xf32>   ->  memref.global "private" @param_w ... {gradfuse.key = "w"}
                                          %w = memref.get_global @param_w
kernel.alloc : memref<2x4xf32>       ->  %t = memref.view %arena[%c64][] : memref<128xi8> to ...
kernel.constant dense<..>            ->  memref.global "private" constant @const_0 = dense<..>
kernel.feed "x", %t                  ->  func.call @gradfuse_feed_0(%t) {gradfuse.key = "x"}
kernel.receive "out", %h             ->  func.call @gradfuse_receive_0(%h) {gradfuse.key = "out"}
kernel.allreduce "mean", %g, %a      ->  func.call @gradfuse_allreduce_0(%g, %a) {gradfuse.key = "mean"}
kernel.kernel "k0" ... (%x, %w, %h)  ->  gpu.launch_func @gradfuse_kernels::@k0
                                            blocks in (%c1, %c1, %c1) threads in (%c32, %c1, %c1)
                                            args(%x : ..., %w : ..., %h : ...)
kernel.for %i = 0 to 10 step 1 { ... }   ->  scf.for %i = %c0 to %c10 step %c1 { ... }
```

Temporaries share one arena at the offsets that `kernel-plan-buffers` gave their
`kernel.alloc`s (it runs first; an alloc without an offset is an error); the arena's
size is recorded as `gradfuse.peak_bytes` on each function and on the module (the
largest over its functions).
"""

from __future__ import annotations

import re
from functools import lru_cache

from xdsl.context import Context
from xdsl.dialects import func, gpu, memref
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    i8,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from gradfuse.diagnostics import GradfuseError, position_of, unique_name
from gradfuse.dialects import kernel as kd
from gradfuse.dialects.kernel import ForOp, YieldOp
from gradfuse.passes.kernel.plan_buffers import ALIGNMENT, align, nbytes
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.lib.gpu_func import build_gpu_func, launch_shape
from gradfuse.passes.lib.rows_lowering import build_rows_func
from gradfuse.passes.lib.tile_lowering import build_tiled_func, tile_sizes

KERNEL_MODULE = "gradfuse_kernels"


@lru_cache(maxsize=1024)
def _initial_value(init: Attribute | None, ty: MemRefType) -> Attribute:
    """A `memref.global` initial value: a dense attribute of the buffer's shape, or unit."""
    if init is None:
        return UnitAttr()
    tensor = TensorType(ty.element_type, ty.get_shape())
    if isinstance(init, FloatAttr):  # a splat, as a scalar of the element type (a mask's: 0/1)
        value = fast.scalar_attr(init.value.data, ty.element_type).value.data  # type: ignore[attr-defined]
        return DenseIntOrFPElementsAttr.from_list(tensor, [value])  # type: ignore[arg-type]
    assert isinstance(init, DenseIntOrFPElementsAttr)
    if init.type == tensor:
        return init
    values = init.get_values()
    return DenseIntOrFPElementsAttr.from_list(tensor, values)  # type: ignore[arg-type]


class HostLowering:
    """Lowers the host side of a module, collecting symbols for its top; `launch` makes a
    kernel's function and its call (here a `gpu.func` and a `gpu.launch_func`;
    `convert-kernel-to-loops` overrides it and `containers`)."""

    pass_name = "convert-kernel-to-gpu"

    def __init__(self, module: ModuleOp):
        self.module = module
        self.symbols: list[Operation] = []
        self.kernels = gpu.ModuleOp(StringAttr(KERNEL_MODULE), Region(Block()))  # type: ignore[arg-type]
        self.params: dict[str, memref.GlobalOp] = {}
        self.externals: dict[tuple[str, str, tuple[Attribute, ...]], str] = {}
        self.taken: set[str] = {
            op.sym_name.data for op in module.body.block.ops if isinstance(op, func.FuncOp)
        }
        self.peak = 0
        self.num_constants = 0

    def unique(self, name: str) -> str:
        name = unique_name(name, self.taken)
        self.taken.add(name)
        return name

    def run(self) -> None:
        """Lowers every function and puts globals, externals and kernels at the top."""
        funcs = [
            op
            for op in self.module.body.block.ops
            if isinstance(op, func.FuncOp) and op.body.blocks
        ]
        for fn in funcs:
            self.lower_function(fn)
        block = self.module.body.block
        for op in [*self.symbols, *self.containers()]:
            if block.first_op is None:
                block.add_op(op)
            else:
                block.insert_op_before(op, funcs[0] if funcs else block.first_op)
        self.module.attributes.pop("gradfuse.peak_bytes", None)  # (printed after the next)
        if self.kernels in self.containers():
            self.module.attributes["gpu.container_module"] = UnitAttr()
        self.module.attributes["gradfuse.peak_bytes"] = IntegerAttr(self.peak, i64)

    def containers(self) -> list[Operation]:
        """What holds the kernels, put after the symbols: the `gpu.module`."""
        return [self.kernels]

    def lower_function(self, fn: func.FuncOp) -> None:
        offsets: dict[SSAValue, int] = {}
        peak = 0
        for a in fn.walk():
            if isinstance(a, kd.AllocOp):
                if a.offset is None:
                    raise GradfuseError(
                        f"{self.pass_name}: a kernel.alloc has no arena offset:"
                        " run kernel-plan-buffers first",
                        position_of(a.location) or position_of(fn.location),
                    )
                offsets[a.result] = a.offset.value.data
                peak = max(peak, offsets[a.result] + nbytes(a.result.type))
        self.peak = max(self.peak, peak)
        entry = fn.body.block
        arena: SSAValue | None = None
        if offsets:
            size = max(ALIGNMENT, align(peak))
            alloc = memref.AllocOp.get(i8, ALIGNMENT, [size])
            alloc.location = fn.location
            Rewriter.insert_op(alloc, InsertPoint.at_start(entry))
            arena = alloc.memref
        fn.attributes["gradfuse.peak_bytes"] = IntegerAttr(peak, i64)
        self.lower_block(entry, arena, offsets)

    def lower_block(
        self, block: Block, arena: SSAValue | None, offsets: dict[SSAValue, int]
    ) -> None:
        """Replaces each kernel-dialect host op of `block` (and of loops inside it)."""
        for op in list(block.ops):
            new: list[Operation]
            if isinstance(op, kd.ParamOp):
                new = [fast.get_global(self.param(op), op.result.type)]
            elif isinstance(op, kd.AllocOp):
                assert arena is not None
                off = fast.constant(offsets[op.result])
                new = [off, fast.view(arena, off.result, op.result.type)]
            elif isinstance(op, kd.ConstantOp):
                new = [fast.get_global(self.constant(op), op.result.type)]
            elif isinstance(op, kd.FeedOp):
                new = [self.call("feed", op.key.data, [op.buffer])]
            elif isinstance(op, kd.ReceiveOp):
                new = [self.call("receive", op.key.data, list(op.buffers))]
            elif isinstance(op, kd.AllReduceOp):
                new = [self.call("allreduce", op.reduce.data, [op.source, op.target])]
            elif isinstance(op, kd.KernelOp | kd.GroupOp | kd.RowsOp):
                new = self.launch(op)
            elif isinstance(op, ForOp):
                self.lower_block(op.body.block, arena, offsets)
                new = self.loop(op)
            elif isinstance(op, YieldOp):
                continue  # a loop body's end: `loop` replaces it by scf.yield
            elif op.dialect_name() == "kernel":
                raise GradfuseError(
                    f"{self.pass_name}: {op.name} cannot stand on the host",
                    position_of(op.location),
                )
            else:
                continue
            for n in new:
                n.location = op.location
            Rewriter.replace_op(op, new, new[-1].results if op.results else [])
            for helper in new[:-1]:  # the old value's name goes to its replacement only
                for res in helper.results:
                    res.name_hint = None

    def param(self, op: kd.ParamOp) -> str:
        key, ty = op.key.data, op.result.type
        assert isinstance(ty, MemRefType)
        glob = self.params.get(key)
        if glob is None:
            name = self.unique("param_" + re.sub(r"[^A-Za-z0-9_]", "_", key))
            glob = memref.GlobalOp.get(StringAttr(name), ty, _initial_value(op.init, ty))
            glob.attributes["gradfuse.key"] = StringAttr(key)
            glob.location = op.location
            self.params[key] = glob
            self.symbols.append(glob)
        elif glob.type != ty:
            raise GradfuseError(
                f'param "{key}" is used with two types: {glob.type} and {ty}',
                position_of(op.location),
            )
        elif isinstance(glob.initial_value, UnitAttr) and op.init is not None:
            glob.properties["initial_value"] = _initial_value(op.init, ty)
        return glob.sym_name.data

    def constant(self, op: kd.ConstantOp) -> str:
        ty = op.result.type
        assert isinstance(ty, MemRefType)
        name = self.unique(f"const_{self.num_constants}")
        self.num_constants += 1
        glob = memref.GlobalOp.get(
            StringAttr(name), ty, _initial_value(op.value, ty), constant=UnitAttr()
        )
        glob.location = op.location
        self.symbols.append(glob)
        return name

    def call(self, kind: str, key: str, buffers: list[SSAValue]) -> func.CallOp:
        """A call of the external `@gradfuse_<kind>_<n>` that stands for host callback `key`."""
        types = tuple(b.type for b in buffers)
        name = self.externals.get((kind, key, types))
        if name is None:
            count = sum(k == kind for k, _, _ in self.externals)
            name = self.unique(f"gradfuse_{kind}_{count}")
            decl = func.FuncOp.external(name, list(types), [])
            decl.attributes["gradfuse.key"] = StringAttr(key)
            self.externals[(kind, key, types)] = name
            self.symbols.append(decl)
        call = func.CallOp(name, buffers, [])
        call.attributes["gradfuse.key"] = StringAttr(key)
        return call

    def launch(self, op: kd.KernelOp | kd.GroupOp | kd.RowsOp) -> list[Operation]:
        name = self.unique(op.sym_name.data)
        if isinstance(op, kd.RowsOp):
            fn, buffers, (blocks, per_block) = build_rows_func(name, op)
        elif isinstance(op, kd.KernelOp) and tile_sizes(op) is not None:
            fn, buffers, (blocks, per_block) = build_tiled_func(name, op)
        else:
            fn, buffers, threads = build_gpu_func(name, op)
            blocks, per_block = launch_shape(threads)
        for shared in fast.workgroup_globals(fn):  # a block's shared arrays, before it
            self.kernels.body.block.add_op(shared)
        self.kernels.body.block.add_op(fn)
        consts = {n: fast.constant(n) for n in (1, blocks, per_block)}
        gx, bx, one = (consts[n].result for n in (blocks, per_block, 1))
        target = SymbolRefAttr(KERNEL_MODULE, [name])
        launch = fast.launch_func(target, [gx, one, one], [bx, one, one], buffers)
        return [*consts.values(), launch]

    def loop(self, op: ForOp) -> list[Operation]:
        bounds = [fast.constant(v) for v in op.bounds]
        old = op.body.block
        body = Block(arg_types=[fast.INDEX])
        old.args[0].replace_all_uses_with(body.args[0])
        for inner in list(old.ops):
            inner.detach()
            if isinstance(inner, YieldOp):
                inner.erase()
            else:
                body.add_op(inner)
        body.add_op(fast.scf_yield())
        lo, hi, step = (b.result for b in bounds)
        return [*bounds, fast.scf_for(lo, hi, step, [], body)]


class ConvertKernelToGpuPass(ModulePass):
    """Lowers kernel-dialect programs to gpu/scf/memref/arith/math/func.

    `ir-opt model.mlir -p convert-kernel-to-gpu -t mlir`
    """

    name = "convert-kernel-to-gpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        HostLowering(op).run()
