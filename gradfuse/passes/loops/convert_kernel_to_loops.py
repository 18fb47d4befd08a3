"""`convert-kernel-to-loops`: kernels become loop nests in `func.func`s, for the CPU.

Where `convert-kernel-to-gpu` maps a kernel's parallel dims onto a thread grid (and the
C backend used to recover loops from `gid = bid * block + tid`), this pass builds the
loop nest straight from the kernel's domain, as MLIR's `convert-linalg-to-parallel-loops`
does: an `scf.parallel` over the parallel dims (dims of size 1 left out), an `scf.for`
per reduction dim carrying the sums, access maps as `arith` index ops. Each loop index
is named after its domain dim. A `kernel.group` is its kernels' nests one after
another in one function; a `kernel.rows` is an `scf.parallel` over its rows with each
phase a nest over the rest of its dims. The host program is `convert-kernel-to-gpu`'s,
with `func.call`s of the kernel functions for launches:

```
func.func private @mm(%x: memref<2x3xf32>, %w: memref<4x3xf32>, %h: memref<2x4xf32>)
    attributes {gradfuse.kernel, gradfuse.kind = "contraction"} {
  scf.parallel (%d0, %d1) = (%c0, %c0) to (%c2, %c4) step (%c1, %c1) {
    %s = scf.for %d2 = %c0 to %c3 step %c1 iter_args(%acc = %zero) -> (f32) {
      %a = memref.load %x[%d0, %d2] : memref<2x3xf32>
      ...
    }
    memref.store %s, %h[%d0, %d1] : memref<2x4xf32>
    scf.reduce
  }
  func.return
}
func.func @main() { ... func.call @mm(%x, %w, %h) {gradfuse.kernel} ... }
```

The loop passes (`loops-*`) then transform these nests, and the C backend prints them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel as kd
from gradfuse.passes.gpu.convert_kernel_to_gpu import HostLowering
from gradfuse.passes.lib.gpu_func import func_frame, kernel_location
from gradfuse.passes.lib.kernel_lowering import INDEX, KernelBuilder
from gradfuse.passes.loops.loop_ir import KERNEL


class LoopBuilder(KernelBuilder):
    """Builds the body of one kernel function as loop nests (see the module docstring)."""

    def __init__(self, entry: Block):
        super().__init__(entry)
        self.dim_names = True
        self.hoisted: list[Operation] = []

    def hoist(self, op: Operation) -> None:
        """Constants go to the top of the function when it is finished (`finish`)."""
        self.hoisted.append(op)

    def finish(self) -> None:
        """Puts the hoisted constants first and ends the function with `func.return`."""
        self.add(func.ReturnOp())
        first = self.entry.first_op
        for op in self.hoisted:
            if first is None:
                self.entry.add_op(op)
            else:
                self.entry.insert_op_before(op, first)

    @contextmanager
    def parallel(self, sizes: Sequence[int], first: int, loc: object) -> Iterator[list[SSAValue]]:
        """An `scf.parallel` over the dims of `sizes` that are not 1 (domain dims `first`,
        `first + 1`, ...); yields the point (0 along the dims of size 1). Without such a
        dim, no loop: the ops go here."""
        dims = [k for k, s in enumerate(sizes) if s != 1]
        point = [self.const(0) for _ in sizes]
        if not dims:
            yield point
            return
        body = Block(arg_types=[INDEX] * len(dims))
        for k, arg in zip(dims, body.args):
            arg.name_hint = f"d{first + k}"
            point[k] = arg
        zero, one = self.const(0), self.const(1)
        loop = scf.ParallelOp(
            [zero] * len(dims), [self.const(sizes[k]) for k in dims], [one] * len(dims),
            Region(body),
        )  # fmt: skip
        self.add(loop, loc)  # type: ignore[arg-type]
        outer, self.block = self.block, body
        yield point
        self.add(scf.ReduceOp())
        self.block = outer

    def nest(self, k: kd.KernelOp, args: dict[SSAValue, SSAValue]) -> None:
        """Kernel `k` as one loop nest."""
        with self.parallel(k.domain_sizes[: k.num_parallel], 0, k.location) as point:
            self.lower_kernel_at(k, point, args)

    def rows(self, rows: kd.RowsOp, args: dict[SSAValue, SSAValue]) -> None:
        """The rows in parallel; in each, the phases one after another."""
        n = len(rows.row_sizes)
        with self.parallel(rows.row_sizes, 0, rows.location) as row:
            for k in rows.body.block.ops:
                if isinstance(k, kd.KernelOp):
                    inner = k.domain_sizes[n : k.num_parallel]
                    with self.parallel(inner, n, k.location) as point:
                        self.lower_kernel_at(k, [*row, *point], args)


def build_loop_func(
    name: str, launch: kd.KernelOp | kd.GroupOp | kd.RowsOp
) -> tuple[func.FuncOp, list[SSAValue]]:
    """The kernel function of a launch and its host buffer operands:

    `build_loop_func("k0", kernel)` -> (`func.func private @k0(...)`, [%x, %w, %h])
    """
    inner = launch.body.block.ops if isinstance(launch, kd.GroupOp | kd.RowsOp) else [launch]
    kernels = [k for k in inner if isinstance(k, kd.KernelOp)]
    host, entry, args = func_frame(kernels)
    builder = LoopBuilder(entry)
    if isinstance(launch, kd.RowsOp):
        builder.rows(launch, args)
        kind = "rows"
    else:
        for k in kernels:
            builder.nest(k, args)
        kind = "group" if isinstance(launch, kd.GroupOp) else launch.kind.data
    builder.finish()
    types = [a.type for a in entry.args]
    fn = func.FuncOp(name, (types, []), Region(entry), StringAttr("private"))
    fn.attributes[KERNEL] = UnitAttr()
    fn.attributes["gradfuse.kind"] = StringAttr(kind)
    fn.location = kernel_location(launch)
    return fn, host


class LoopsHostLowering(HostLowering):
    """`HostLowering` with kernel functions and calls (see the module docstring)."""

    pass_name = "convert-kernel-to-loops"

    def __init__(self, module: ModuleOp):
        super().__init__(module)
        self.functions: list[Operation] = []

    def containers(self) -> list[Operation]:
        return self.functions

    def launch(self, op: kd.KernelOp | kd.GroupOp | kd.RowsOp) -> list[Operation]:
        name = self.unique(op.sym_name.data)
        fn, buffers = build_loop_func(name, op)
        self.functions.append(fn)
        call = func.CallOp(name, buffers, [])
        call.attributes[KERNEL] = UnitAttr()
        return [call]


class ConvertKernelToLoopsPass(ModulePass):
    """Lowers kernel-dialect programs to func/scf/memref/arith/math loop nests.

    `ir-opt model.mlir -p kernel-plan-buffers,convert-kernel-to-loops`
    """

    name = "convert-kernel-to-loops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        LoopsHostLowering(op).run()
