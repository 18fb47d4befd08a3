"""gradfuse's passes, registered lazily by flag, and the named pipelines.

ir-opt model.tg -p tg-autodiff,tg-decompose,cse
ir-opt model.tg --pipeline default
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline


def _lazy(module: str, name: str) -> Callable[[], type[ModulePass]]:
    """The pass class `name` of `gradfuse.passes.<module>`, imported when first asked for
    (`ir-opt -p tg-autodiff` loads no lowering)."""
    return lambda: getattr(importlib.import_module(f"gradfuse.passes.{module}"), name)


PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "tg-autodiff": _lazy("tg.autodiff", "TgAutodiffPass"),
    "tg-decompose": _lazy("tg.decompose", "TgDecomposePass"),
    "tg-lower-access": _lazy("tg.lower_access", "TgLowerAccessPass"),
    "tg-loop-state": _lazy("tg.loop_state", "TgLoopStatePass"),
    "tg-fuse": _lazy("tg.fuse", "TgFusePass"),
    "convert-tg-to-kernel": _lazy("kernel.convert_tg_to_kernel", "ConvertTgToKernelPass"),
    "kernel-squeeze": _lazy("kernel.squeeze", "KernelSqueezePass"),
    "kernel-fuse-rows": _lazy("kernel.fuse_rows", "KernelFuseRowsPass"),
    "kernel-layout": _lazy("kernel.layout", "KernelLayoutPass"),
    "kernel-pad-rows": _lazy("kernel.pad_rows", "KernelPadRowsPass"),
    "kernel-split-dims": _lazy("kernel.split_dims", "KernelSplitDimsPass"),
    "kernel-split-phases": _lazy("kernel.split_phases", "KernelSplitPhasesPass"),
    "kernel-tile": _lazy("kernel.tile", "KernelTilePass"),
    "kernel-block-reduce": _lazy("kernel.block_reduce", "KernelBlockReducePass"),
    "kernel-plan-buffers": _lazy("kernel.plan_buffers", "KernelPlanBuffersPass"),
    "convert-kernel-to-gpu": _lazy("gpu.convert_kernel_to_gpu", "ConvertKernelToGpuPass"),
    "convert-kernel-to-loops": _lazy("loops.convert_kernel_to_loops", "ConvertKernelToLoopsPass"),
    "loops-coalesce": _lazy("loops.loops_coalesce", "LoopsCoalescePass"),
    "loops-distribute": _lazy("loops.loops_distribute", "LoopsDistributePass"),
    "loops-interchange": _lazy("loops.loops_interchange", "LoopsInterchangePass"),
    "loops-pack": _lazy("loops.loops_pack", "LoopsPackPass"),
    "loops-pack-tiles": _lazy("loops.loops_pack_tiles", "LoopsPackTilesPass"),
    "loops-pad": _lazy("loops.loops_pad", "LoopsPadPass"),
    "loops-trim-taps": _lazy("loops.loops_trim_taps", "LoopsTrimTapsPass"),
    "loops-skip-dead-sums": _lazy("loops.loops_skip_dead_sums", "LoopsSkipDeadSumsPass"),
    "loops-vectorize": _lazy("loops.loops_vectorize", "LoopsVectorizePass"),
    "loops-unroll-jam": _lazy("loops.loops_unroll_jam", "LoopsUnrollJamPass"),
    "loops-transpose-writes": _lazy("loops.loops_transpose_writes", "LoopsTransposeWritesPass"),
    "loops-transpose-reads": _lazy("loops.loops_transpose_reads", "LoopsTransposeReadsPass"),
    "loops-parallelize": _lazy("loops.loops_parallelize", "LoopsParallelizePass"),
    "canonicalize": _lazy("cleanup", "FastCanonicalizePass"),
    "cse": _lazy("cleanup", "FastCSEPass"),
    "dce": _lazy("cleanup", "FastDCEPass"),
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
    "cpu": (
        "kernels,kernel-layout,kernel-pad-rows,kernel-split-dims,kernel-split-phases,kernel-plan-buffers,convert-kernel-to-loops,"
        "canonicalize,cse,"
        "loops-distribute,loops-interchange,loops-pack,loops-trim-taps,loops-pad,loops-coalesce,loops-vectorize,cse,loops-unroll-jam,cse,"
        "loops-skip-dead-sums,loops-transpose-writes,loops-transpose-reads,loops-pack-tiles,loops-parallelize"
    ),
}
"""Named pipelines, each extending the one before: `tg` (differentiate and simplify,
what the reference interpreter runs), `kernels` (fused kernels over buffers) and
`default` (upstream gpu/scf/memref IR: each kernel a GPU grid, what the lowered
interpreter runs and `ir-opt -p default` prints); `cuda` is `default` with the
contractions tiled through shared memory (`kernel-tile`) and long reductions with few
outputs shared by whole blocks (`kernel-block-reduce`), what the CUDA backend compiles;
`cpu` is `kernels` lowered to loop nests for the CPU (`convert-kernel-to-loops`),
vectorised and parallelised by the `loops-*` passes: what the c backend compiles."""


def make_context() -> Context:
    """A context with the dialects gradfuse programs use, from tg down to gpu."""
    from xdsl.dialects import arith, builtin, func, gpu, math, memref, scf, vector

    from gradfuse.dialects.kernel import KERNEL
    from gradfuse.dialects.lanes import LANES
    from gradfuse.dialects.tg import TG

    ctx = Context()
    for dialect in (
        builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf, gpu.GPU,
        vector.Vector, TG, KERNEL, LANES,
    ):  # fmt: skip
        ctx.load_dialect(dialect)
    return ctx


PIPELINE_OPTIONS: dict[str, tuple[str, str]] = {
    "jam-work": ("loops-unroll-jam", "min-work"),
    "lanes": ("loops-vectorize", "lanes"),
    "jam-rows": ("loops-unroll-jam", "rows"),
    "jam-fill": ("loops-unroll-jam", "fill"),
    "pack-tile": ("loops-pack", "tile"),
}
"""Options of the named pipelines, as MLIR's registered pipelines take them: each sets an
option of one pass in the pipeline (`ir-opt m.tg -p 'cpu{jam-work=0}'`: register blocks
for nests of any size, as the golden tests of small programs ask; `jam-rows=4`: blocks of
4 rows, for a machine of 16 vector registers; `jam-fill=6`: a block that a short dim (3
taps) leaves filled up to 6 rows; `pack-tile=32`: the packed tiles of long
reductions 2 vectors of 16 lanes)."""


def with_options(name: str, options: str) -> str:
    """The passes of pipeline `name` with its `options` (`jam-work=0 ...`) set; options of
    one pass go in one brace (`loops-unroll-jam{min-work=0 rows=4}`)."""
    passes = expand(PIPELINES[name]).split(",")
    fields: dict[str, list[str]] = {}
    for option in options.split():
        key, _, value = option.partition("=")
        target = PIPELINE_OPTIONS.get(key)
        if target is None or not value or target[0] not in passes:
            known = [k for k, (p, _) in PIPELINE_OPTIONS.items() if p in passes]
            raise ValueError(
                f"pipeline {name} has no option {option!r} (its options: "
                f"{', '.join(f'{k}=N' for k in known) or 'none'})"
            )
        flag, field = target
        fields.setdefault(flag, []).append(f"{field}={value}")
    return ",".join(f"{p}{{{' '.join(fields[p])}}}" if p in fields else p for p in passes)


def expand(spec: str) -> str:
    """Replaces pipeline names in a pass spec by their passes (recursively), with the
    pipeline's options set where it has them (`cpu{jam-work=0}`)."""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        name, brace, options = part.partition("{")
        if name in PIPELINES:
            out.append(
                with_options(name, options.rstrip("}")) if brace else expand(PIPELINES[name])
            )
        elif part:
            out.append(part)
    return ",".join(out)


def pipeline(spec: str) -> PassPipeline:
    """A pass pipeline from a comma-separated spec of flags and pipeline names."""
    return PassPipeline.parse_spec(PASSES, expand(spec))


def run_pipeline(module: ModuleOp, name: str = "default", ctx: Context | None = None) -> None:
    """Applies a named pipeline (or a pass spec) to `module` in place."""
    from gradfuse.gcpause import paused_gc

    with paused_gc():
        pipeline(name).apply(ctx or make_context(), module)


KERNEL_LOCAL = ("canonicalize", "cse", "dce")
"""Passes besides the `loops-*` ones that change each function on its own."""


def kernel_tail(spec: str) -> tuple[str, str]:
    """`spec` as the passes up to its last `convert-kernel-to-loops` and the ones after
    it, when those each transform one kernel function at a time (the `loops-*` passes,
    canonicalize, cse, dce): what `run_by_kernels` may run a few kernels at a time.

        kernel_tail("cpu")  # ("kernels,...,convert-kernel-to-loops", "canonicalize,...")
    """
    passes = expand(spec).split(",")
    if "convert-kernel-to-loops" not in passes:
        return spec, ""
    k = len(passes) - passes[::-1].index("convert-kernel-to-loops")
    tail = passes[k:]
    if not all(p.startswith("loops-") or p.split("{")[0] in KERNEL_LOCAL for p in tail):
        return spec, ""
    return ",".join(passes[:k]), ",".join(tail)


def run_by_kernels(
    module: ModuleOp, spec: str, size: int, each: Callable[[ModuleOp], None]
) -> None:
    """Applies `spec` (a `kernel_tail`) to `module`'s kernel functions `size` at a time
    in program order, each group in a module of its own that `each` is given when its
    passes are done (a backend compiles it meanwhile), then to the rest; the functions
    go back in their order, and the IR is `run_pipeline(module, spec)`'s."""
    from gradfuse.gcpause import paused_gc
    from gradfuse.passes.loops.loop_ir import kernel_functions

    order = list(module.ops)
    kernels = list(kernel_functions(module))
    passes, ctx = pipeline(spec), make_context()
    try:
        with paused_gc():
            for start in range(0, len(kernels), size):
                group = kernels[start : start + size]
                for fn in group:
                    fn.detach()
                part = ModuleOp(group)
                passes.apply(ctx, part)
                each(part)
                for fn in group:
                    fn.detach()
            passes.apply(ctx, module)  # the rest: the host program
    finally:
        for op in order:  # in program order again, also when `each` raised
            if op.parent is not None:
                op.detach()
            module.body.block.add_op(op)
