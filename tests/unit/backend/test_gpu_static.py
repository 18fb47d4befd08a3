"""Static GPU figures (gradfuse/backend/cuda/static.py, benchmarks/gpu_static.py): the
occupancy formula on hand-computed cases, ptxas's report parsed, and the kernels of the
seed MLP and of a tiled matmul with a block reduction compiled by nvcc for sm_90: every
kernel without spills, within 255 registers and 48 KiB of static shared memory, named
as the module names them, with a launch that fits on an SM."""

from __future__ import annotations

from collections import Counter

import pytest
from compiled import needs_nvcc  # tests/unit (conftest puts it on the path)
from example_programs import record_mlp
from kernel_programs import kernel, load, main, parse, store
from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.cuda.compiler import cuda_source
from gradfuse.backend.cuda.static import (
    H100_SXM,
    SM90,
    LaunchConfig,
    Usage,
    instruction_mix,
    kernel_names,
    launch_configs,
    occupancy,
    parse_resource_usage,
    resource_usage,
    roofline_s,
)
from gradfuse.frontend.recorder import program
from gradfuse.passes import expand, run_pipeline
from gradfuse.passes.kernel.tile import KernelTilePass
from gradfuse.profiler import launches

# (threads, registers, smem bytes) -> (blocks per SM, occupancy %, limiter), by hand:
# W = ceil(T / 32) warps, RW = ceil(32 R / 256) 256 registers per warp,
# blocks = min(64 // W, 32, (16384 // RW) * 4 // W, 233472 // ceil((S + 1024) / 128) 128)
OCCUPANCY = [
    ((256, 32, 0), (8, 100.0, "warps+registers")),  # W 8: 64//8 = 8; RW 1024: 16*4//8 = 8
    ((256, 128, 0), (2, 25.0, "registers")),  # RW 4096: 4 warps per sub-partition, 16 // 8
    ((256, 64, 0), (4, 50.0, "registers")),  # RW 2048: 8*4 = 32 warps, 32 // 8
    ((256, 33, 0), (6, 75.0, "registers")),  # 1056 -> RW 1280: 12*4 = 48 warps, 48 // 8
    ((64, 192, 0), (4, 12.5, "registers")),  # RW 6144: 2 per sub-partition (not 65536//6144
    # = 10 warps per SM: registers are split among the 4 sub-partitions), 8 // 2
    ((32, 16, 0), (32, 50.0, "blocks")),  # W 1: 64 by warps, 32 by the block limit
    ((128, 32, 48 * 1024), (4, 25.0, "smem")),  # 49152 + 1024 reserved: 233472 // 50176
    ((1024, 64, 0), (1, 50.0, "registers")),  # RW 2048 x 32 warps = 65536: just fits
    ((1024, 65, 0), (0, 0.0, "registers")),  # RW 2304 x 32 > 65536 registers per block
    ((2048, 16, 0), (0, 0.0, "block size")),
]


@pytest.mark.parametrize(("block", "want"), OCCUPANCY)
def test_occupancy_follows_the_cuda_occupancy_calculator(
    block: tuple[int, int, int], want: tuple[int, float, str]
) -> None:
    occ = occupancy(*block)
    assert (occ.blocks_per_sm, occ.percent, occ.limiter) == want


def test_roofline_takes_the_slower_of_compute_and_memory() -> None:
    assert roofline_s(H100_SXM.flops, 0) == pytest.approx(1.0)
    assert roofline_s(H100_SXM.flops, 2 * H100_SXM.bandwidth) == pytest.approx(2.0)
    assert roofline_s(0, H100_SXM.bandwidth, blocks=H100_SXM.sms // 2) == pytest.approx(2.0)
    assert roofline_s(0, H100_SXM.bandwidth, blocks=10 * H100_SXM.sms) == pytest.approx(1.0)


REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'r1' for 'sm_90'
ptxas info    : Function properties for r1
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 37 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 20.724 ms
ptxas info    : Compiling entry function 'k0' for 'sm_90'
ptxas info    : Function properties for k0
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 0 barriers
"""


def test_parse_resource_usage_reads_each_entry_function() -> None:
    found = parse_resource_usage(REPORT)
    assert list(found) == ["r1", "k0"]
    r1, k0 = found["r1"], found["k0"]
    assert (r1.registers, r1.smem, r1.barriers, r1.stack) == (37, 1024, 1, 8)
    assert (r1.spill_stores, r1.spill_loads, r1.spills) == (4, 12, 16)
    assert (k0.registers, k0.smem, k0.spills) == (16, 0, 0)


A, X, S = "memref<32x32xf32>", "memref<2x1024xf32>", "memref<2xf32>"
MAP2 = "affine_map<(d0, d1) -> (d0, d1)>"
# c = a @ b, 32x32x32 (kernel-tile stages it through shared memory in 16x16 tiles), and
# s = sum of x^2 along 1024 values per row (kernel-block-reduce gives each row a block)
TILED = main(
    f"  %a = kernel.alloc : {A}\n  %b = kernel.alloc : {A}\n  %c = kernel.alloc : {A}\n"
    f"  %x = kernel.alloc : {X}\n  %s = kernel.alloc : {S}\n"
    f'  kernel.feed "a", %a : {A}\n  kernel.feed "b", %b : {A}\n  kernel.feed "x", %x : {X}\n'
    + kernel(
        "mm", "contraction", [32, 32, 32], 2, [("%a", A), ("%b", A), ("%c", A)],
        load("%p", "%b0", "affine_map<(d0, d1, d2) -> (d0, d2)>", A)
        + load("%q", "%b1", "affine_map<(d0, d1, d2) -> (d2, d1)>", A)
        + '  %m = arith.mulf %p, %q : f32\n  %r = kernel.reduce "add" %m : f32\n'
        + store("%r", "%b2", MAP2, A),
    )
    + kernel(
        "total", "reduction", [2, 1024], 1, [("%x", X), ("%s", S)],
        load("%v", "%b0", MAP2, X)
        + '  %w = arith.mulf %v, %v : f32\n  %t = kernel.reduce "add" %w : f32\n'
        + store("%t", "%b1", "affine_map<(d0) -> (d0)>", S),
    )
    + f'  kernel.receive "c", %c : {A}\n  kernel.receive "s", %s : {S}\n  func.return'
)  # fmt: skip


def lowered(module: ModuleOp, kernel_ir: bool) -> tuple[ModuleOp, dict[str, int]]:
    """`module` through the `cuda` pipeline (its kernel-level passes left out when it is
    kernel IR already), and each kernel's FLOPs as `gradfuse.profiler.launches` counts
    them before buffers are planned, as benchmarks/gpu_static.py does."""
    passes = expand("cuda").split(",")
    cut = passes.index("kernel-plan-buffers")
    first = passes[passes.index("kernel-tile") if kernel_ir else 0 : cut]
    run_pipeline(module, ",".join(first))
    flops = {r.symbol: r.flops for r in launches(module) if r.is_kernel}
    run_pipeline(module, ",".join(passes[cut:]))
    return module, flops


Checked = tuple[Usage, dict[str, LaunchConfig], dict[str, Counter[str]] | None]


def check_kernels(module: ModuleOp, flops: dict[str, int]) -> Checked:
    """The static checks every kernel of a lowered module passes; ptxas's kernels."""
    usage = resource_usage(cuda_source(module))
    names = kernel_names(module)
    configs = launch_configs(module)
    assert sorted(usage.kernels) == sorted(names) == sorted(flops)
    assert sorted(c.kernel for c in configs) == sorted(names)  # one launch per kernel
    for c in configs:
        r = usage.kernels[c.kernel]
        assert r.spill_stores == r.spill_loads == 0, (c.kernel, r)
        assert r.smem <= SM90.static_smem_per_block, (c.kernel, r)
        assert 0 < r.registers <= SM90.max_registers_per_thread, (c.kernel, r)
        assert c.threads <= SM90.max_threads_per_block and c.blocks >= 1, c
        assert occupancy(c.threads, r.registers, r.smem).blocks_per_sm >= 1, (c, r)
    mix = instruction_mix(usage.cubin)
    if mix is not None:  # cuobjdump found
        assert sorted(mix) == sorted(names)
        assert all(sum(m.values()) > 0 for m in mix.values())
    return usage, {c.kernel: c for c in configs}, mix


@needs_nvcc
def test_seed_mlp_kernels_fit_sm90() -> None:
    record_mlp(255, 2, 1)
    module, flops = lowered(program().module.clone(), kernel_ir=False)
    check_kernels(module, flops)
    assert set(flops) == {"r0", "g6"}  # a row-by-row run of both forward layers, a group
    assert sum(flops.values()) > 2 * 2 * 255 * 255 * 2  # at least the two forward matmuls


@needs_nvcc
def test_tiled_matmul_and_block_reduce_use_shared_memory() -> None:
    module, flops = lowered(parse(TILED), kernel_ir=True)
    usage, configs, mix = check_kernels(module, flops)
    assert flops["mm"] == 2 * 32 * 32 * 32
    tile = KernelTilePass()
    # one block per 16x16 tile of c, staging 16x16 slices of a and b (floats)
    assert configs["mm"].blocks == (32 // tile.tm) * (32 // tile.tn)
    mm = usage.kernels["mm"]
    assert mm.smem >= (tile.tm * tile.tk + tile.tk * tile.tn) * 4 and mm.barriers >= 1
    assert usage.kernels["rtotal"].smem > 0  # the tree that combines a row's partial sums
    assert configs["rtotal"].blocks == 2  # a block per row
    if mix is not None:  # cuobjdump found
        assert mix["mm"]["fp"] > 0  # the FFMAs
