"""The `gpu.func` of a launch: its frame (host buffers, entry block, argument map),
attributes and launch shape, shared by the plain (`kernel_lowering`), row-by-row (`rows_lowering`)
and tiled (`tile_lowering`) lowerings:

    fn, buffers, threads = build_gpu_func("k0", kernel)
    # gpu.func @k0(%x: memref<2x4xf32>, ...) kernel attributes {gradfuse.kind = "contraction",
    #     gradfuse.threads = 8 : i64}, [%x, %w, %h], 8
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import gpu
from xdsl.dialects.builtin import FusedLoc, StringAttr, UnitAttr, UnknownLoc, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from gradfuse.dialects import kernel as kd
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.lib.kernel_lowering import KernelBuilder

MAX_BLOCK = 256
WARP = 32


def launch_shape(threads: int) -> tuple[int, int]:
    """(blocks, threads per block) for `threads` threads: 100 -> (1, 128), 1000 -> (4, 256)."""
    block = min(MAX_BLOCK, max(WARP, -(-threads // WARP) * WARP))
    return -(-threads // block), block


def kernel_location(op: Operation) -> Attribute:
    """The provenance of a launch: the op's location, else those of a group's kernels."""
    if not isinstance(op.location, UnknownLoc) or not isinstance(op, kd.GroupOp):
        return op.location
    locs = [k.location for k in op.body.block.ops if not isinstance(k.location, UnknownLoc)]
    unique = list(dict.fromkeys(locs))
    if not unique:
        return op.location
    return unique[0] if len(unique) == 1 else FusedLoc(unique)


def build_gpu_func(
    name: str, launch: kd.KernelOp | kd.GroupOp
) -> tuple[gpu.FuncOp, list[SSAValue], int]:
    """The `gpu.func` of a kernel or group, its host buffer operands and its thread count.

    `build_gpu_func("k0", kernel)` -> (`gpu.func @k0(...) kernel`, [%x, %w, %h], 8)
    """
    kernels = (
        [k for k in launch.body.block.ops if isinstance(k, kd.KernelOp)]
        if isinstance(launch, kd.GroupOp)
        else [launch]
    )
    host, entry, args = func_frame(kernels)
    total = KernelBuilder(entry).lower(kernels, args)
    kind = "group" if isinstance(launch, kd.GroupOp) else launch.kind.data
    fn = kernel_func(name, entry, kind, total, kernel_location(launch))
    return fn, host, total


def func_frame(
    kernels: Sequence[kd.KernelOp],
) -> tuple[list[SSAValue], Block, dict[SSAValue, SSAValue]]:
    """The host buffers that `kernels` read and write (each once, in order), the entry
    block of their `gpu.func` (one argument each), and each kernel's buffer argument ->
    that function argument."""
    host: list[SSAValue] = list(dict.fromkeys(b for k in kernels for b in k.buffers))
    entry = Block(arg_types=[b.type for b in host])
    position = dict(zip(host, entry.args))
    args = {a: position[b] for k in kernels for a, b in zip(k.buffer_args, k.buffers)}
    return host, entry, args


def kernel_func(name: str, entry: Block, kind: str, threads: int, loc: Attribute) -> gpu.FuncOp:
    """`gpu.func @name kernel` over the filled `entry`, with gradfuse's kind and thread
    count attributes."""
    fn = fast.gpu_func(name, entry)
    fn.attributes["gpu.kernel"] = UnitAttr()  # what MLIR reads; xDSL reads the property
    fn.attributes["workgroup_attributions"] = fast.scalar_attr(0, i64)
    fn.attributes["gradfuse.kind"] = StringAttr(kind)
    fn.attributes["gradfuse.threads"] = fast.scalar_attr(threads, i64)
    fn.location = loc
    return fn
