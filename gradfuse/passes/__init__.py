"""gradfuse's passes, registered lazily by flag, and the named pipelines.

ir-opt model.tg -p tg-autodiff,tg-decompose,cse
ir-opt model.tg --pipeline default
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline


def _tg_autodiff() -> type[ModulePass]:
    from gradfuse.passes.tg.autodiff import TgAutodiffPass

    return TgAutodiffPass


def _tg_decompose() -> type[ModulePass]:
    from gradfuse.passes.tg.decompose import TgDecomposePass

    return TgDecomposePass


def _tg_lower_access() -> type[ModulePass]:
    from gradfuse.passes.tg.lower_access import TgLowerAccessPass

    return TgLowerAccessPass


def _tg_loop_state() -> type[ModulePass]:
    from gradfuse.passes.tg.loop_state import TgLoopStatePass

    return TgLoopStatePass


def _tg_fuse() -> type[ModulePass]:
    from gradfuse.passes.tg.fuse import TgFusePass

    return TgFusePass


def _convert_tg_to_kernel() -> type[ModulePass]:
    from gradfuse.passes.kernel.convert_tg_to_kernel import ConvertTgToKernelPass

    return ConvertTgToKernelPass


def _kernel_squeeze() -> type[ModulePass]:
    from gradfuse.passes.kernel.squeeze import KernelSqueezePass

    return KernelSqueezePass


def _kernel_fuse_rows() -> type[ModulePass]:
    from gradfuse.passes.kernel.fuse_rows import KernelFuseRowsPass

    return KernelFuseRowsPass


def _kernel_tile() -> type[ModulePass]:
    from gradfuse.passes.kernel.tile import KernelTilePass

    return KernelTilePass


def _kernel_block_reduce() -> type[ModulePass]:
    from gradfuse.passes.kernel.block_reduce import KernelBlockReducePass

    return KernelBlockReducePass


def _kernel_plan_buffers() -> type[ModulePass]:
    from gradfuse.passes.kernel.plan_buffers import KernelPlanBuffersPass

    return KernelPlanBuffersPass


def _convert_kernel_to_gpu() -> type[ModulePass]:
    from gradfuse.passes.gpu.convert_kernel_to_gpu import ConvertKernelToGpuPass

    return ConvertKernelToGpuPass


def _cleanup(name: str) -> Callable[[], type[ModulePass]]:
    def get() -> type[ModulePass]:
        from gradfuse.passes import cleanup

        return {
            "canonicalize": cleanup.FastCanonicalizePass,
            "cse": cleanup.FastCSEPass,
            "dce": cleanup.FastDCEPass,
        }[name]

    return get


PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "tg-autodiff": _tg_autodiff,
    "tg-decompose": _tg_decompose,
    "tg-lower-access": _tg_lower_access,
    "tg-loop-state": _tg_loop_state,
    "tg-fuse": _tg_fuse,
    "convert-tg-to-kernel": _convert_tg_to_kernel,
    "kernel-squeeze": _kernel_squeeze,
    "kernel-fuse-rows": _kernel_fuse_rows,
    "kernel-tile": _kernel_tile,
    "kernel-block-reduce": _kernel_block_reduce,
    "kernel-plan-buffers": _kernel_plan_buffers,
    "convert-kernel-to-gpu": _convert_kernel_to_gpu,
    "canonicalize": _cleanup("canonicalize"),
    "cse": _cleanup("cse"),
    "dce": _cleanup("dce"),
}
"""gradfuse's own passes and the xDSL passes its pipelines use, by flag (xDSL's
canonicalize, cse and dce through `cleanup`: the same passes, faster)."""

PIPELINES: dict[str, str] = {
    "tg": "tg-autodiff,tg-decompose,canonicalize,cse,dce",
    "kernels": (
        "tg,tg-loop-state,tg-lower-access,cse,dce,tg-fuse,convert-tg-to-kernel,"
        "kernel-squeeze,kernel-fuse-rows"
    ),
    "default": "kernels,kernel-plan-buffers,convert-kernel-to-gpu",
    "cuda": "kernels,kernel-tile,kernel-block-reduce,kernel-plan-buffers,convert-kernel-to-gpu",
}
"""Named pipelines, each extending the one before: `tg` (differentiate and simplify,
what the reference interpreter runs), `kernels` (fused kernels over buffers) and
`default` (upstream gpu/scf/memref IR: what `execute()` compiles and
`ir-opt -p default` prints); `cuda` is `default` with the contractions tiled through
shared memory (`kernel-tile`) and long reductions with few outputs shared by whole
blocks (`kernel-block-reduce`), what the CUDA backend compiles."""


def make_context() -> Context:
    """A context with the dialects gradfuse programs use, from tg down to gpu."""
    from xdsl.dialects import arith, builtin, func, gpu, math, memref, scf

    from gradfuse.dialects.kernel import KERNEL
    from gradfuse.dialects.tg import TG

    ctx = Context()
    for dialect in (
        builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf, gpu.GPU,
        TG, KERNEL,
    ):  # fmt: skip
        ctx.load_dialect(dialect)
    return ctx


def expand(spec: str) -> str:
    """Replaces pipeline names in a pass spec by their passes (recursively)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    return ",".join(expand(PIPELINES[p]) if p in PIPELINES else p for p in parts)


def pipeline(spec: str) -> PassPipeline:
    """A pass pipeline from a comma-separated spec of flags and pipeline names."""
    return PassPipeline.parse_spec(PASSES, expand(spec))


def run_pipeline(module: ModuleOp, name: str = "default", ctx: Context | None = None) -> None:
    """Applies a named pipeline (or a pass spec) to `module` in place."""
    from gradfuse.gcpause import paused_gc

    with paused_gc():
        pipeline(name).apply(ctx or make_context(), module)
