"""Static GPU figures of a lowered module's kernels, found without a GPU: ptxas's resource
usage (registers, spills, static shared memory), the launch configurations of the host
code, the theoretical occupancy on sm_90 and a roofline estimate of a kernel's time.

    from gradfuse.backend.cuda.compiler import cuda_source
    from gradfuse.backend.cuda.static import launch_configs, occupancy, resource_usage
    from gradfuse.passes import run_pipeline
    run_pipeline(module, "cuda")
    usage = resource_usage(cuda_source(module))          # nvcc -cubin --resource-usage
    for launch in launch_configs(module):                # gpu.launch_func, program order
        r = usage.kernels[launch.kernel]
        occ = occupancy(launch.threads, r.registers, r.smem + launch.dynamic_smem)
        print(launch.kernel, launch.grid, launch.block, r.registers, f"{occ.percent:.0f} %")
    # k0 (4, 1, 1) (256, 1, 1) 32 100 %

Occupancy follows the CUDA occupancy calculator (`cuda_occupancy.h`,
`cudaOccMaxActiveBlocksPerMultiprocessor`) for a block of T threads, R registers per
thread and S bytes of shared memory per block (static + dynamic):

- warps per block W = ceil(T / 32); T > 1024 does not launch;
- warp limit: floor(64 / W) blocks (64 warps = 2048 threads per SM);
- block limit: 32 blocks per SM;
- register limit: a warp gets RW = ceil(32·R / 256)·256 registers; each of the SM's 4
  sub-partitions holds floor(16384 / RW) warps, so the SM floor(16384 / RW)·4 warps and
  floor(that / W) blocks; no block launches when RW·W > 65536 (registers per block) or
  RW·ceil(W / 4)·4 > 65536 (the hardware's check);
- shared-memory limit: a block takes SB = ceil((S + 1 KiB) / 128)·128 bytes (1 KiB per
  block is reserved by the system on sm_8x/9x), so floor(228 KiB / SB) blocks, the full
  228 KiB carveout assumed; S > 227 KiB does not launch (over 48 KiB must be dynamic);
- blocks per SM = the least of the four; occupancy = blocks · W / 64.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from math import ceil
from pathlib import Path

from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import SSAValue

from gradfuse.backend.cuda.compiler import FLAGS, nvcc
from gradfuse.diagnostics import GradfuseError

KIB = 1024


@dataclass(frozen=True)
class GpuLimits:
    """Per-SM and per-block limits of a compute capability (CUDA C Programming Guide,
    "Technical Specifications per Compute Capability"; CUDA occupancy calculator)."""

    arch: str = "sm_90"
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    registers_per_block: int = 65536
    register_unit: int = 256
    """Registers are given to a warp in multiples of this."""
    sub_partitions: int = 4
    max_registers_per_thread: int = 255
    smem_per_sm: int = 228 * KIB
    smem_per_block: int = 227 * KIB
    """The most a block may have, the part beyond `static_smem_per_block` dynamic."""
    static_smem_per_block: int = 48 * KIB
    smem_reserved_per_block: int = 1 * KIB
    smem_unit: int = 128


SM90 = GpuLimits()
"""Hopper (H100, H200): compute capability 9.0."""


@dataclass(frozen=True)
class Peaks:
    """A GPU's peak rates, for roofline estimates, and what a kernel launch costs."""

    name: str
    sms: int
    flops: float
    """FP32 FLOP/s without tensor cores."""
    bandwidth: float
    """Bytes/s of device memory."""
    launch_s: float
    """Seconds per launch, launched one by one from the host."""
    graph_launch_s: float
    """Seconds per kernel node of a CUDA graph."""
    source: str


H100_SXM = Peaks(
    "H100 SXM5 80GB", 132, 67e12, 3.35e12, 3e-6, 1e-6,
    "FP32 67 TFLOP/s (non-tensor), HBM3 3.35 TB/s, 132 SMs: NVIDIA H100 Tensor Core GPU"
    " datasheet; launch overhead: ~2-4 us per launch from the host, ~1 us per kernel node"
    " in a CUDA graph (commonly measured figures, not a specification)",
)  # fmt: skip


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel (entry function)."""

    registers: int = 0
    smem: int = 0
    """Bytes of static shared memory per block."""
    barriers: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class Usage:
    """A translation unit's kernels by name, and its cubin."""

    kernels: dict[str, Resources]
    cubin: bytes


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FIELDS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "stack": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}


def parse_resource_usage(text: str) -> dict[str, Resources]:
    """The entry functions of ptxas's `--resource-usage` (or `-Xptxas -v`) report:

        ptxas info    : Compiling entry function 'k0' for 'sm_90'
        ptxas info    : Function properties for k0
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 37 registers, used 1 barriers, 1024 bytes smem

    gives {"k0": Resources(registers=37, smem=1024, barriers=1)}.
    """
    fields: dict[str, dict[str, int]] = {}
    entries: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
            entries.append(current)
        elif m := _PROPERTIES.search(line):
            current = m.group(1)
        elif current is not None:
            found = fields.setdefault(current, {})
            for name, pattern in _FIELDS.items():
                if v := pattern.search(line):
                    found[name] = int(v.group(1))
    return {name: Resources(**fields.get(name, {})) for name in entries}


def resource_usage(source: str, arch: str = "sm_90") -> Usage:
    """Compiles a CUDA translation unit as the backend does (`compiler.FLAGS`) with
    `--resource-usage`; the resources of each kernel and the cubin. `-w` leaves out
    nvcc's warnings (unused variables of the generated C), which change no code."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.cubin"
        src.write_text(source)
        cmd = [nvcc(), "-cubin", f"-arch={arch}", *FLAGS, "--resource-usage", "-w",
               "-o", str(out), str(src)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise GradfuseError(f"nvcc failed:\n{done.stderr[-4000:]}")
        return Usage(parse_resource_usage(done.stdout + "\n" + done.stderr), out.read_bytes())


@dataclass(frozen=True)
class LaunchConfig:
    """One `gpu.launch_func` of the host code."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int = 0

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.block[0] * self.block[1] * self.block[2]


def _constant(value: SSAValue, what: str) -> int:
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    raise GradfuseError(f"the {what} of a gpu.launch_func is not an arith.constant")


def launch_configs(module: ModuleOp) -> list[LaunchConfig]:
    """The grid and block of every `gpu.launch_func` of a lowered module, program order
    (a launch inside a loop counts once)."""
    out = []
    for op in module.walk():
        if not isinstance(op, gpu.LaunchFuncOp):
            continue
        grid = (op.gridSizeX, op.gridSizeY, op.gridSizeZ)
        block = (op.blockSizeX, op.blockSizeY, op.blockSizeZ)
        dynamic = op.dynamicSharedMemorySize
        out.append(
            LaunchConfig(
                op.kernel.nested_references.data[-1].data,
                tuple(_constant(v, "grid size") for v in grid),  # type: ignore[arg-type]
                tuple(_constant(v, "block size") for v in block),  # type: ignore[arg-type]
                0 if dynamic is None else _constant(dynamic, "dynamic shared memory"),
            )
        )
    return out


def kernel_names(module: ModuleOp) -> list[str]:
    """The kernels (`gpu.func`s with the `kernel` attribute) of a lowered module."""
    return [
        op.sym_name.data
        for op in module.walk()
        if isinstance(op, gpu.FuncOp) and op.kernel is not None
    ]


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, and what limits them."""

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    limiter: str
    """The binding limits, "+"-joined: warps, blocks, registers, smem (or why none fit)."""

    @property
    def percent(self) -> float:
        return 100.0 * self.warps_per_sm / self.max_warps_per_sm


def occupancy(threads: int, registers: int, smem: int, limits: GpuLimits = SM90) -> Occupancy:
    """Theoretical occupancy of blocks of `threads` threads using `registers` registers
    per thread and `smem` bytes of shared memory per block (see the module docstring).

    `occupancy(256, 32, 0).percent == 100.0`, `occupancy(256, 128, 0).percent == 25.0`
    """
    lim = limits
    warps = ceil(threads / lim.warp_size)

    def none(why: str) -> Occupancy:
        return Occupancy(0, 0, lim.max_warps_per_sm, why)

    if threads < 1 or threads > lim.max_threads_per_block:
        return none("block size")
    if registers > lim.max_registers_per_thread:
        return none("registers")
    if smem > lim.smem_per_block:
        return none("smem")
    per_warp = ceil(registers * lim.warp_size / lim.register_unit) * lim.register_unit
    assumed = per_warp * ceil(warps / lim.sub_partitions) * lim.sub_partitions
    if per_warp * warps > lim.registers_per_block or assumed > lim.registers_per_block:
        return none("registers")
    sub_partition = lim.registers_per_sm // lim.sub_partitions
    by_registers = (
        (sub_partition // per_warp) * lim.sub_partitions // warps if per_warp else 1 << 30
    )
    per_block = ceil((smem + lim.smem_reserved_per_block) / lim.smem_unit) * lim.smem_unit
    limits_found = {
        "warps": lim.max_warps_per_sm // warps,
        "blocks": lim.max_blocks_per_sm,
        "registers": by_registers,
        "smem": lim.smem_per_sm // per_block,
    }
    blocks = min(limits_found.values())
    binding = "+".join(name for name, n in limits_found.items() if n == blocks)
    return Occupancy(blocks, blocks * warps, lim.max_warps_per_sm, binding)


def roofline_s(flops: float, nbytes: float, peaks: Peaks = H100_SXM, blocks: int = 0) -> float:
    """Seconds of a kernel by the roofline: max(flops / peak FLOP/s, bytes / bandwidth).
    With `blocks` (the grid), both peaks are scaled by min(1, blocks / SMs): a grid of
    fewer blocks than SMs leaves SMs idle. An estimate, launch overhead not included."""
    share = min(1.0, blocks / peaks.sms) if blocks else 1.0
    return max(flops / (peaks.flops * share), nbytes / (peaks.bandwidth * share))


# SASS opcode classes for `instruction_mix` (the opcode before its first ".")
_FP = {"FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSET", "FSEL", "FCHK", "FRND", "FSWZADD",
       "MUFU", "HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "DADD", "DMUL", "DFMA", "DSETP",
       "FADD32I", "FMUL32I", "FFMA32I", "F2F", "F2I", "I2F", "F2FP", "I2FP", "F2IP"}  # fmt: skip
_MEMORY = {"LDG", "STG", "LDS", "STS", "LDC", "ULDC", "LD", "ST", "LDL", "STL", "ATOM", "ATOMS",
           "ATOMG", "RED", "REDG", "LDGSTS", "LDSM", "LDGDEPBAR", "CCTL", "MEMBAR", "FENCE"}  # fmt: skip
_CONTROL = {"BRA", "BRX", "JMP", "EXIT", "CALL", "RET", "BAR", "BSSY", "BSYNC", "WARPSYNC",
            "YIELD", "DEPBAR", "BPT", "BMOV", "KILL", "NANOSLEEP", "ACQBULK", "ELECT"}  # fmt: skip
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def sass_tool(name: str) -> str | None:
    """`cuobjdump` or `nvdisasm`: on PATH, else from the `nvidia-cuda-cuobjdump` /
    `nvidia-cuda-nvdisasm` wheels (`nvidia/*/bin/`), else None."""
    if found := shutil.which(name):
        return found
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(base).glob(f"*/bin/{name}")):
            return str(candidate)
    return None


def _opcode_class(opcode: str) -> str:
    if opcode in _FP:
        return "fp"
    if opcode in _MEMORY:
        return "memory"
    if opcode in _CONTROL:
        return "control"
    return "int"  # integer, address, predicate, move and uniform-datapath instructions


def instruction_mix(cubin: bytes) -> dict[str, Counter[str]] | None:
    """Per kernel, its SASS instructions (static: each counted once, however often it
    runs; NOPs left out) by class: fp (float arithmetic, comparisons, special functions and
    conversions), int (integer, address, predicate and move instructions), memory, control.
    None when `cuobjdump` is not found."""
    tool = sass_tool("cuobjdump")
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.cubin"
        path.write_bytes(cubin)
        done = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    mix: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in done.stdout.splitlines():
        if m := re.match(r"\s*Function : (\S+)", line):
            current = mix.setdefault(m.group(1), Counter())
        elif current is not None and (m := _SASS_LINE.search(line)):
            if m.group(1) != "NOP":
                current[_opcode_class(m.group(1).split(".")[0])] += 1
    return mix
