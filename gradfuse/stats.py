"""Kernel statistics of a program, on kernel-level IR or on lowered IR.

A launch is a `kernel.kernel` outside any group or a `kernel.group` (kernel
level), or a `gpu.launch_func` (lowered). Only host code counts: the functions
of the module, never the loops inside kernels.

    kernel_stats(module)  # a 1000-step loop of 5 launches:
    # KernelStats(kernels=5, kernels_per_iteration=5, per_loop=(5,), launches=5000, peak_bytes=...)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import func, gpu, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation

from gradfuse.dialects import kernel as kd
from gradfuse.dialects.kernel import ForOp
from gradfuse.passes.loops.loop_ir import int_constant, is_kernel


@dataclass(frozen=True)
class KernelStats:
    """Launch counts and the arena size of a program."""

    kernels: int
    """Launches in the program text (each written once, whatever the loops)."""
    kernels_per_iteration: int
    """Launches per iteration of a top-level loop, nested loops counted with their trip
    counts; the largest over the top-level loops. A program without loops is one
    iteration: then it equals `kernels`."""
    per_loop: tuple[int, ...]
    """Launches per iteration of each top-level loop, in program order."""
    launches: int
    """Launches one run executes (loops unrolled by their trip counts)."""
    peak_bytes: int
    """Bytes of the arena that holds every temporary (see `passes.kernel.plan_buffers`)."""


def trip_count(op: Operation) -> int:
    """Iterations of a `kernel.for` or of an `scf.for` with constant bounds (else 1)."""
    if isinstance(op, ForOp):
        return op.trip_count
    assert isinstance(op, scf.ForOp)
    trips = constant_trips(op)
    return 1 if trips is None else trips


def constant_trips(op: scf.ForOp) -> int | None:
    """Iterations of an `scf.for` whose bounds and step are constants, else None."""
    lo, hi, step = (int_constant(v) for v in (op.lb, op.ub, op.step))
    if lo is None or hi is None or step is None or step < 1:
        return None
    return max(0, -(-(hi - lo) // step))


def _count(block: Block) -> tuple[int, int, list[int]]:
    """(launches written, launches executed, per-iteration launches of each loop) in `block`."""
    written = executed = 0
    loops: list[int] = []
    for op in block.ops:
        if (
            isinstance(op, (*kd.LAUNCH_GROUPS, gpu.LaunchFuncOp))
            or (isinstance(op, kd.KernelOp) and not isinstance(op.parent_op(), kd.LAUNCH_GROUPS))
            or (isinstance(op, func.CallOp) and is_kernel(op))
        ):
            written += 1
            executed += 1
        elif isinstance(op, ForOp | scf.ForOp):
            w, per_iteration, _ = _count(op.body.block)
            written += w
            executed += per_iteration * trip_count(op)
            loops.append(per_iteration)
    return written, executed, loops


def _peak_bytes(module: ModuleOp) -> int:
    attr = module.attributes.get("gradfuse.peak_bytes")
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    from gradfuse.passes.kernel.plan_buffers import module_peak_bytes

    return module_peak_bytes(module)


def kernel_stats(module: ModuleOp) -> KernelStats:
    """Counts the launches of `module`'s functions and reads (or plans) its peak bytes.

    `kernel_stats(module).kernels_per_iteration` -> 5 for the seed MLP step.
    """
    written = executed = 0
    loops: list[int] = []
    for op in module.body.block.ops:
        if isinstance(op, func.FuncOp) and op.body.blocks:
            w, e, per_loop = _count(op.body.block)
            written, executed = written + w, executed + e
            loops += per_loop
    return KernelStats(
        kernels=written,
        kernels_per_iteration=max(loops) if loops else written,
        per_loop=tuple(loops),
        launches=executed,
        peak_bytes=_peak_bytes(module),
    )


__all__ = ["KernelStats", "constant_trips", "kernel_stats", "trip_count"]
