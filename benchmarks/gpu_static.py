"""Static GPU figures of every kernel of the training steps, found without a GPU: nvcc's
resource usage, the launch configurations, occupancy on sm_90, FLOPs and bytes, and a
roofline-plus-launch estimate of the step time on an H100 SXM.

    .venv/bin/python benchmarks/gpu_static.py [--models mlp,transformer,dcgan,resnet18]
        [--log-every 1] [--dcgan-batch 8] [--resnet-batch 8] [--resnet-image 32] [--no-sass]

Models: the seed MLP (benchmarks/mlp_seed.py: 255-255-255, batch 2, SGD), and
examples/transformer.py, examples/dcgan.py and examples/resnet18.py at their own sizes
(printed) unless changed by the options. Each records `--log-every` steps whose last
one receives the loss (1: one step, as `benchmarks/convnets.py` counts kernels per
step; the examples' own LOG_EVERY gives the mix of their training runs) and goes
through the `cuda` pipeline. Per kernel (`gpu.func`) of the module:

- regs, spills (bytes stored/loaded), smem (static shared bytes per block): ptxas's
  report of `nvcc -cubin -arch=sm_90 -O3 --resource-usage`, the backend's flags;
- grid and block: the `gpu.launch_func`'s constants; blk/SMs: blocks / 132 SMs;
- occ: theoretical occupancy on sm_90 and what limits it (the CUDA occupancy
  calculator's rules, `gradfuse/backend/cuda/static.py`);
- runs: launches per recorded run (0 for kernels in a loop of no trips);
- FLOPs and bytes (read + written): `gradfuse.profiler.launches`'s static counts;
- roof us: ESTIMATE max(FLOPs / 67 TFLOP/s, bytes / 3.35 TB/s); grid us: the same with
  both peaks scaled by min(1, blocks / 132), the share of SMs the grid can keep busy;
- SASS fp/int/mem/ctl: the static instruction mix (% of the kernel's SASS text, not of
  executed instructions), when `cuobjdump` is found (on PATH or from the
  `nvidia-cuda-cuobjdump` wheel); else left out.

The summary estimates a step as the kernels' times plus a launch overhead per launch,
one by one from the host (3 us) and as CUDA graph nodes (1 us), which is how the cuda
backend replays launches between host calls; host callbacks (feeders, receivers) and
copies are left out. Estimates, not measurements.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from convnets import example  # benchmarks/convnets.py
from mlp_seed import BATCH as MLP_BATCH  # benchmarks/mlp_seed.py
from mlp_seed import WIDTH as MLP_WIDTH
from mlp_seed import record as record_mlp
from xdsl.dialects.builtin import ModuleOp

import gradfuse
from gradfuse.backend.cuda.compiler import FLAGS, cuda_source
from gradfuse.backend.cuda.static import (
    H100_SXM,
    SM90,
    LaunchConfig,
    Occupancy,
    Resources,
    instruction_mix,
    kernel_names,
    launch_configs,
    occupancy,
    resource_usage,
    roofline_s,
    sass_tool,
)
from gradfuse.frontend.recorder import program
from gradfuse.passes import expand, run_pipeline
from gradfuse.profiler import Launch, launches
from gradfuse.profiler.text import render, si

SIZES = {  # model -> the example's constants that set its shapes (printed)
    "transformer": ("VOCAB", "LENGTH", "BATCH", "D_MODEL", "HEADS", "FF", "LAYERS"),
    "dcgan": ("BATCH", "IMAGE", "NC", "NZ", "NGF", "NDF"),
    "resnet18": ("BATCH", "IMAGE", "NUM_CLASSES"),
}


@dataclass
class Row:
    """One kernel's figures."""

    work: Launch
    launch: LaunchConfig
    res: Resources
    occ: Occupancy
    roof_s: float
    grid_s: float
    mix: dict[str, int] | None


def record(model: str, steps: int, sizes: dict[str, int]) -> str:
    """Records `steps` steps of `model` (the last receiving the loss); its sizes as text."""
    if model == "mlp":
        record_mlp(steps)
        return f"width {MLP_WIDTH}, batch {MLP_BATCH}, SGD"
    ex = example(model, **sizes)
    gradfuse.reset()
    ex.record(steps=steps, log_every=steps)
    return ", ".join(f"{key} {getattr(ex, key)}" for key in SIZES[model])


def lower(module: ModuleOp) -> list[Launch]:
    """Runs the `cuda` pipeline on `module` in place; the kernel launches as
    `gradfuse.profiler.launches` sees them just before buffers are planned, where the
    kernels have their final names (`kernel-block-reduce` wraps some into rows)."""
    passes = expand("cuda").split(",")
    cut = passes.index("kernel-plan-buffers")
    run_pipeline(module, ",".join(passes[:cut]))
    work = [launch for launch in launches(module) if launch.is_kernel]
    run_pipeline(module, ",".join(passes[cut:]))
    return work


def dims(xyz: tuple[int, int, int]) -> str:
    return str(xyz[0]) if xyz[1:] == (1, 1) else "x".join(map(str, xyz))


def percent_mix(mix: dict[str, int] | None) -> str:
    total = sum(mix.values()) if mix else 0
    if not mix or not total:
        return "-"
    return "/".join(
        f"{100 * mix.get(c, 0) / total:.0f}" for c in ("fp", "int", "memory", "control")
    )


def analyse(model: str, steps: int, sizes: dict[str, int], sass: bool) -> dict[str, Any]:
    """Records, lowers and compiles one model; its rows and timings."""
    start = time.perf_counter()
    shapes = record(model, steps, sizes)
    module = program().module.clone()
    work = lower(module)
    lowered = time.perf_counter()
    usage = resource_usage(cuda_source(module))
    compiled = time.perf_counter()
    mixes = instruction_mix(usage.cubin) if sass else None
    configs = launch_configs(module)
    names = [w.symbol for w in work]
    if names != [c.kernel for c in configs] or sorted(names) != sorted(usage.kernels):
        raise SystemExit(f"{model}: launches, gpu.launch_funcs and ptxas's kernels differ")
    assert sorted(kernel_names(module)) == sorted(usage.kernels)
    rows = []
    for w, c in zip(work, configs, strict=True):
        res = usage.kernels[c.kernel]
        nbytes = w.bytes_read + w.bytes_written
        rows.append(
            Row(
                w, c, res, occupancy(c.threads, res.registers, res.smem + c.dynamic_smem),
                roofline_s(w.flops, nbytes), roofline_s(w.flops, nbytes, blocks=c.blocks),
                None if mixes is None else dict(mixes.get(c.kernel, {})),
            )
        )  # fmt: skip
    return {
        "shapes": shapes, "rows": rows, "lower_s": lowered - start,
        "nvcc_s": compiled - lowered, "sass": mixes is not None,
    }  # fmt: skip


def table(rows: list[Row], sass: bool) -> str:
    head = ["kernel", "kind", "runs", "grid", "block", "regs", "spill st/ld", "smem", "occ %",
            "limit", "blk/SMs", "FLOPs", "bytes", "roof us", "grid us"]  # fmt: skip
    if sass:
        head.append("SASS fp/int/mem/ctl %")
    out = [head]
    for r in rows:
        line = [
            r.launch.kernel, r.work.op.split(":")[0], str(r.work.executions),
            dims(r.launch.grid), dims(r.launch.block), str(r.res.registers),
            f"{r.res.spill_stores}/{r.res.spill_loads}", str(r.res.smem),
            f"{r.occ.percent:.0f}", r.occ.limiter, f"{r.launch.blocks / H100_SXM.sms:.2f}",
            si(r.work.flops), si(r.work.bytes_read + r.work.bytes_written),
            f"{r.roof_s * 1e6:.2f}", f"{r.grid_s * 1e6:.2f}",
        ]  # fmt: skip
        if sass:
            line.append(percent_mix(r.mix))
        out.append(line)
    return render(out, right=frozenset(range(2, 16)) - {9})


def summary(rows: list[Row], steps: int, sass: bool) -> list[str]:
    runs = sum(r.work.executions for r in rows) / steps
    flops = sum(r.work.flops * r.work.executions for r in rows) / steps
    nbytes = sum((r.work.bytes_read + r.work.bytes_written) * r.work.executions for r in rows)
    nbytes /= steps
    roof = sum(r.roof_s * r.work.executions for r in rows) / steps
    grid = sum(r.grid_s * r.work.executions for r in rows) / steps
    top = max(rows, key=lambda r: r.res.registers)
    spilled = [r.launch.kernel for r in rows if r.res.spills]
    idle = sum(1 for r in rows if not r.work.executions)
    big = sum(1 for r in rows if r.launch.blocks >= H100_SXM.sms)
    occ = sorted(r.occ.percent for r in rows)
    lines = [
        f"kernels: {len(rows)} compiled, {runs:g} launches per step"
        + (f" ({idle} kernels in loops of no trips, never launched)" if idle else ""),
        f"kernels with >= {H100_SXM.sms} blocks (one per SM): {big} of {len(rows)};"
        f" largest grid {max(r.launch.blocks for r in rows)} blocks",
        f"registers: max {top.res.registers} ({top.launch.kernel});"
        f" spills: {'none' if not spilled else ', '.join(spilled)};"
        f" static smem: max {max(r.res.smem for r in rows)} B per block",
        f"occupancy: min {occ[0]:.0f} %, median {occ[len(occ) // 2]:.0f} %, max {occ[-1]:.0f} %",
        f"work per step: {si(round(flops))}FLOP, {si(round(nbytes))}B"
        f" ({flops / nbytes if nbytes else 0:.2f} FLOP/B)",
    ]
    for label, kernels in (("roofline", roof), ("roofline, grid-scaled", grid)):
        eager = kernels + runs * H100_SXM.launch_s
        graph = kernels + runs * H100_SXM.graph_launch_s
        lines.append(
            f"ESTIMATED step time ({label}): kernels {kernels * 1e6:.1f} us; + launches"
            f" {eager * 1e6:.1f} us one by one ({H100_SXM.launch_s * 1e6:g} us each),"
            f" {graph * 1e6:.1f} us in CUDA graphs ({H100_SXM.graph_launch_s * 1e6:g} us each)"
        )
    if sass:
        total: dict[str, int] = {}
        for r in rows:
            for key, n in (r.mix or {}).items():
                total[key] = total.get(key, 0) + n
        lines.append(f"SASS mix, all kernels' text, fp/int/mem/ctl %: {percent_mix(total)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,transformer,dcgan,resnet18")
    parser.add_argument("--log-every", type=int, default=1, help="steps recorded per model")
    parser.add_argument("--dcgan-batch", type=int, default=None, help="default: the example's")
    parser.add_argument("--resnet-batch", type=int, default=None, help="default: the example's")
    parser.add_argument("--resnet-image", type=int, default=None, help="default: the example's")
    parser.add_argument("--no-sass", action="store_true", help="no SASS instruction mix")
    args = parser.parse_args()
    sizes: dict[str, dict[str, int]] = {"mlp": {}, "transformer": {}, "dcgan": {}, "resnet18": {}}
    for model, key, value in (("dcgan", "BATCH", args.dcgan_batch),
                              ("resnet18", "BATCH", args.resnet_batch),
                              ("resnet18", "IMAGE", args.resnet_image)):  # fmt: skip
        if value is not None:
            sizes[model][key] = value
    sass = not args.no_sass and sass_tool("cuobjdump") is not None
    print(
        f"target: {SM90.arch}, nvcc -cubin -arch={SM90.arch} {' '.join(FLAGS)} --resource-usage -w"
    )
    print(
        "occupancy (theoretical, the CUDA occupancy calculator's rules): W = ceil(threads / 32)"
        " warps per block, RW = 256 * ceil(32 * regs / 256) registers per warp,"
        " SB = 128 * ceil((smem + 1024) / 128) bytes per block; blocks/SM = min(64 // W, 32,"
        " (16384 // RW) * 4 // W, 233472 // SB); occupancy = blocks/SM * W / 64 warps"
    )
    print(f"peaks ({H100_SXM.name}): {H100_SXM.source}")
    if not sass:
        print("SASS instruction mix: left out (no cuobjdump found, or --no-sass)")
    for model in args.models.split(","):
        found = analyse(model, args.log_every, sizes[model], sass)
        print(
            f"\n== {model} ({found['shapes']}); {args.log_every} step(s) recorded;"
            f" record+lower {found['lower_s']:.1f} s, nvcc {found['nvcc_s']:.1f} s"
        )
        print(table(found["rows"], found["sass"]))
        print(f"-- {model} summary")
        for line in summary(found["rows"], args.log_every, found["sass"]):
            print(f"   {line}")


if __name__ == "__main__":
    main()
