"""Interop: lowered IR parses and verifies in real MLIR (`mlir-opt-22`, Debian's mlir-22-tools).

Skipped when no `mlir-opt-22` / `mlir-opt` is on PATH (`apt-get install mlir-22-tools`).
Both xDSL's custom and generic printing, with locations, are checked, and the
default pipeline's output on every example (examples/*.tg, and the programs that
examples/mlp.py and examples/transformer.py record, at their real sizes):

    ir-opt prog.mlir -p kernel-plan-buffers,convert-kernel-to-gpu -t mlir | mlir-opt-22 --verify-each
    ir-opt examples/linreg.tg -p default -t mlir | mlir-opt-22 --verify-each

MLIR is also a second compiler of the `cuda` pipeline's output: its NVVM pipeline lowers
every example (those above, DCGAN at batch 8 and ResNet-18 at batch 2, one step each) to
PTX for sm_90, a `.entry` per `gpu.func` kernel, and the host code to the llvm dialect
(no ptxas, CUDA toolkit or GPU needed: `cubin-format=isa` stops at PTX text):

    ir-opt examples/linreg.tg -p cuda -t mlir | mlir-opt-22 \\
        --gpu-lower-to-nvvm-pipeline="cubin-chip=sm_90 cubin-features=+ptx80 cubin-format=isa"

A block's shared arrays (the `cuda` pipeline's tiles, `__shared__` in our CUDA C) are
`memref.global`s in workgroup memory (`fast_ops.workgroup_globals`), which MLIR makes
`.shared` arrays: a `memref.alloca` in space 3 would be per-thread memory to MLIR
(`test_nvvm_shared_memory_is_a_global_or_an_attribution_not_an_alloca`).
"""

from __future__ import annotations

import functools
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from example_programs import load_example, record_mlp, record_reverser, transformer_example
from kernel_programs import PROGRAMS, lower
from xdsl.dialects import gpu
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp
from xdsl.printer import Printer

import gradfuse
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import PASSES, expand, run_pipeline

MLIR_OPT = shutil.which("mlir-opt-22") or shutil.which("mlir-opt")
IR_OPT = Path(sys.executable).parent / "ir-opt"
EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.tg"))

pytestmark = pytest.mark.skipif(
    MLIR_OPT is None, reason="mlir-opt-22 not found (apt-get install mlir-22-tools)"
)


def mlir_opt(text: str, *flags: str) -> str:
    """`mlir-opt --verify-each` on `text`; fails the test with MLIR's diagnostics."""
    assert MLIR_OPT is not None
    done = subprocess.run(
        [MLIR_OPT, "--verify-each", *flags, "-"], input=text, capture_output=True, text=True
    )
    assert done.returncode == 0, f"mlir-opt rejected the module:\n{done.stderr}\n{text}"
    return done.stdout


def printed(module: ModuleOp, generic: bool) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic, print_debuginfo=True).print_op(module)
    return out.getvalue()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lowered_program_verifies_in_mlir(name: str, generic: bool) -> None:
    out = mlir_opt(printed(lower(PROGRAMS[name].module()), generic))
    assert "gpu.container_module" in out
    assert "gpu.launch_func" in out
    assert ") kernel" in out  # MLIR sees the gpu.kernel attribute


def test_mlir_keeps_locations_and_keys() -> None:
    out = mlir_opt(printed(lower(PROGRAMS["contraction"].module()), True), "--mlir-print-debuginfo")
    assert 'loc("model.py":7:3)' in out  # the kernel's provenance, on its gpu.func
    assert 'loc("model.py":3:5)' in out  # a body op's location, on the arith.mulf it became
    assert 'gradfuse.key = "w"' in out


def test_mlir_can_lower_further() -> None:
    """Upstream passes run on our output: scf to cf, gpu kernel outlining checks."""
    text = printed(lower(PROGRAMS["sgd_loop"].module()), False)
    out = mlir_opt(text, "--convert-scf-to-cf", "--canonicalize")
    assert "scf.for" not in out


@pytest.mark.skipif(
    "convert-kernel-to-gpu" not in PASSES, reason="convert-kernel-to-gpu is not registered"
)
def test_ir_opt_output_verifies(tmp_path: Path) -> None:
    src = tmp_path / "prog.mlir"
    src.write_text(PROGRAMS["group"].text)
    for flags in ([], ["--print-op-generic"]):
        done = subprocess.run(
            [
                str(IR_OPT),
                str(src),
                "-p",
                "kernel-plan-buffers,convert-kernel-to-gpu",
                "-t",
                "mlir",
                *flags,
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        mlir_opt(done.stdout)


def default_pipeline_verifies(
    path: Path, debuginfo: bool = False, pipeline: str = "default"
) -> str:
    """`ir-opt path -p default -t mlir` (or another pipeline), checked by
    `mlir-opt --verify-each`; its output (with `debuginfo`, both print locations)."""
    if "convert-kernel-to-gpu" not in expand("default"):
        pytest.skip("the default pipeline does not lower to gpu yet")
    flags = ["--print-debuginfo"] if debuginfo else []
    done = subprocess.run(
        [str(IR_OPT), str(path), "-p", pipeline, "-t", "mlir", *flags],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return mlir_opt(done.stdout, *(["--mlir-print-debuginfo"] if debuginfo else []))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_default_pipeline_on_examples_verifies(example: Path) -> None:
    default_pipeline_verifies(example)


def record_python_example(name: str) -> None:
    """Records the program of examples/<name>.py at the example's own sizes (not run)."""
    if name == "mlp":
        record_mlp(width=255, batch=2, steps=1000)
    else:
        example = transformer_example()
        record_reverser(example, steps=example.STEPS, log_every=example.LOG_EVERY)


@pytest.mark.parametrize("pipeline", ["default", "cuda"])
@pytest.mark.parametrize("name", ["mlp", "transformer"], ids=["mlp.py", "transformer.py"])
def test_default_pipeline_on_python_examples_verifies(
    name: str, pipeline: str, tmp_path: Path
) -> None:
    """The programs the Python examples record, saved by `gradfuse.ir_text()` with their
    Python locations (`loc("forward@0"("model.py":7:3))`), which MLIR parses and keeps;
    `cuda` adds the shared-memory tiles (workgroup memory space 3) and their barriers."""
    record_python_example(name)
    src = tmp_path / f"{name}.tg"
    src.write_text(gradfuse.ir_text(print_locations=True))
    gradfuse.reset()
    out = default_pipeline_verifies(src, debuginfo=True, pipeline=pipeline)
    assert "gpu.launch_func" in out
    shared = re.search(r"memref.get_global @\w+ : memref<[0-9x]+xf32, 3>", out)  # MLIR's i64
    assert (pipeline == "cuda" and name == "transformer") == (shared is not None)
    assert "memref.alloca" not in out
    assert 'loc("forward@' in out and 'loc("backward@' in out
    assert "example_programs.py" in out


NVVM_PIPELINE = (
    "--gpu-lower-to-nvvm-pipeline=cubin-chip=sm_90 cubin-features=+ptx80 cubin-format=isa"
)
"""MLIR's GPU-to-NVVM pipeline down to PTX text: `cubin-format=isa` makes its
`gpu-module-to-binary` stop at the assembly (no ptxas, no GPU); `+ptx80` because the
NVVM target's default PTX ISA 6.0 predates sm_90 (LLVM aborts: "PTX version 6.0 does
not support target 'sm_90'. Minimum required PTX version is 7.8")."""

NVVM_TILED = ["transformer.py", "dcgan.py", "resnet18.py"]
"""The examples whose `cuda` IR has workgroup tiles (16x16 matmul tiles, block reductions)."""
NVVM_PROGRAMS = [e.name for e in EXAMPLES] + ["mlp.py", *NVVM_TILED]
NVVM_SIZES = {"dcgan": {"BATCH": 8}, "resnet18": {"BATCH": 2, "IMAGE": 32, "NUM_CLASSES": 10}}
"""DCGAN and ResNet-18 at tests/dump_pipelines.py's sizes, one step each (`record`)."""

HOST_OPS = {"builtin.module", "gpu.binary", "gpu.launch_func"}
"""What may remain outside the llvm dialect after the NVVM pipeline: the launches of
the kernels of the gpu.binary, which `mlir-translate` turns into runtime calls."""

ASSEMBLY = re.compile(r'assembly = "((?:[^"\\]|\\.)*)"')


class NvvmResult:
    """An example's `cuda`-pipeline IR through MLIR's NVVM pipeline: `tiles` maps each
    `gpu.func` kernel to its memrefs in workgroup memory, `ptx` each PTX `.entry` to its
    text, `target` the `.target` lines, `shared` each `.shared` array declared (in a
    kernel or at module scope) to its bytes, `host_ops` the op names outside the
    gpu.binary."""

    def __init__(self, module: ModuleOp, out: str) -> None:
        self.tiles = {
            fn.sym_name.data: workgroup_memrefs(fn)
            for fn in module.walk()
            if isinstance(fn, gpu.FuncOp) and fn.kernel is not None
        }
        # The PTX is the `assembly` string of the gpu.binary's #gpu.object, which MLIR
        # prints with each byte outside printable ASCII, `"` and `\\` escaped: \0A, \22, \\.
        assemblies = ASSEMBLY.findall(out)
        ptx = "".join(re.sub(r"\\([0-9A-F]{2}|\\)", unescape, a) for a in assemblies)
        bodies = re.split(r"^(?=(?:\.visible )?\.entry )", ptx, flags=re.M)[1:]
        self.ptx = {re.match(r"[.\w ]*\.entry (\w+)\(", b)[1]: b for b in bodies}  # type: ignore[index]
        self.target = re.findall(r"^\.target .*$", ptx, flags=re.M)
        self.shared = dict(re.findall(r"^\s*\.shared \.align \d+ \.b8 (\w+)\[(\d+)\];", ptx, re.M))
        self.host_ops = set(re.findall(r'"(\w+\.[\w.]+)"\(', ASSEMBLY.sub("", out)))


def unescape(match: re.Match[str]) -> str:
    code = match[1]
    return "\\" if code == "\\" else chr(int(code, 16))


def workgroup_memrefs(fn: gpu.FuncOp) -> int:
    """How many memrefs of a kernel are in workgroup memory (`memref<..., 3 : i64>`, a
    block's `__shared__` array in our CUDA C): our allocas, or workgroup attributions."""
    values = [*fn.body.block.args, *(r for op in fn.walk() for r in op.results)]
    spaces = [v.type.memory_space for v in values if isinstance(v.type, MemRefType)]
    return sum(isinstance(s, IntegerAttr) and s.value.data == 3 for s in spaces)


def cuda_input(name: str) -> str:
    """The .tg text of an example: examples/<name>.tg, or the program examples/<name>.py
    records (mlp.py, transformer.py at their real sizes, as above; else `NVVM_SIZES`)."""
    stem, suffix = name.rsplit(".", 1)
    if suffix == "tg":
        return (Path(__file__).parents[2] / "examples" / name).read_text()
    if stem in ("mlp", "transformer"):
        record_python_example(stem)
    else:
        gradfuse.reset()
        load_example(stem, **NVVM_SIZES[stem]).record(steps=1, log_every=1)
    text = gradfuse.ir_text()
    gradfuse.reset()
    return text


@functools.cache
def nvvm_compiled(name: str) -> NvvmResult:
    """`ir-opt <example> -p cuda -t mlir | mlir-opt-22 --verify-each NVVM_PIPELINE
    --mlir-print-op-generic`, run once per example for the tests below (in process up to
    the printed MLIR: `ir-opt` verifies after every pass and takes about 4x as long)."""
    assert MLIR_OPT is not None
    module = parse_tg(cuda_input(name), name)
    run_pipeline(module, "cuda")
    text = io.StringIO()
    Printer(stream=text).print_op(module)
    done = subprocess.run(
        [MLIR_OPT, "--verify-each", NVVM_PIPELINE, "--mlir-print-op-generic", "-"],
        input=text.getvalue(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"the NVVM pipeline rejected {name}:\n{done.stderr[-4000:]}"
    return NvvmResult(module, done.stdout)


@pytest.mark.parametrize("name", NVVM_PROGRAMS)
def test_nvvm_pipeline_compiles_examples_to_ptx(name: str) -> None:
    """Every kernel of the `cuda` pipeline's IR becomes a PTX `.entry` for sm_90, and the
    host code (memref.globals, loops, feeder calls, launches) lowers to the llvm dialect:

        ir-opt examples/linreg.tg -p cuda -t mlir | mlir-opt-22 --verify-each \\
            --gpu-lower-to-nvvm-pipeline="cubin-chip=sm_90 cubin-features=+ptx80 cubin-format=isa"
    """
    got = nvvm_compiled(name)
    assert got.tiles, "no gpu.func kernel"
    assert got.target == [".target sm_90"]
    assert sorted(got.ptx) == sorted(got.tiles)
    assert any(got.tiles.values()) == (name in NVVM_TILED)
    assert {op for op in got.host_ops if not op.startswith("llvm.")} <= HOST_OPS


@pytest.mark.parametrize("name", NVVM_TILED)
def test_nvvm_pipeline_puts_workgroup_tiles_in_shared_memory(name: str) -> None:
    """Each workgroup tile of a kernel (the `cuda` pipeline's 16x16 matmul tiles and block
    reductions: `@<kernel>_shared<k>`) is a `.shared` array of its size that the kernel
    uses, and no kernel has a per-thread local depot (the command line of
    `test_nvvm_pipeline_compiles_examples_to_ptx`)."""
    got = nvvm_compiled(name)
    for kernel, tiles in got.tiles.items():
        assert "__local_depot" not in got.ptx[kernel], kernel
        for k in range(tiles):
            assert f"{kernel}_shared{k}" in got.shared, kernel
            assert re.search(rf"\b{kernel}_shared{k}\b", got.ptx[kernel]), kernel


WORKGROUP_TILES = """module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @alloca_tile(%out: memref<16xf32>) kernel {
      %t = memref.alloca() : memref<16xf32, 3 : i64>
      BODY
    }
    gpu.func @attributed_tile(%out: memref<16xf32>) workgroup(%t : memref<16xf32, 3 : i64>)
        kernel {
      BODY
    }
    memref.global "private" @tile : memref<16xf32, 3 : i64> = uninitialized
    gpu.func @global_tile(%out: memref<16xf32>) kernel {
      %t = memref.get_global @tile : memref<16xf32, 3 : i64>
      BODY
    }
  }
}""".replace(
    "BODY",
    """%i = gpu.thread_id x
      %c15 = arith.constant 15 : index
      %one = arith.constant 1.0 : f32
      memref.store %one, %t[%i] : memref<16xf32, 3 : i64>
      gpu.barrier
      %j = arith.subi %c15, %i : index
      %v = memref.load %t[%j] : memref<16xf32, 3 : i64>
      memref.store %v, %out[%i] : memref<16xf32>
      gpu.return""",
)
"""Three kernels of 16 threads that each store to the tile, wait for the block, and read
another thread's slot: the tile as a `memref.alloca` in space 3 (what gradfuse emitted
before), as a workgroup attribution, and as a `memref.global` in space 3 (what it
emits now: xDSL's gpu.func has no workgroup attributions)."""


def test_nvvm_shared_memory_is_a_global_or_an_attribution_not_an_alloca() -> None:
    """Why a block's shared array is a `memref.global`: in `WORKGROUP_TILES`, the alloca
    becomes a 64-byte `.local` depot of each thread whose address is `cvta.shared`-
    converted, with no `.shared` array (the examples' tiled kernels were that); the
    attribution and the global are a `.shared` array of 64 bytes
    (`mlir-opt-22 --verify-each NVVM_PIPELINE` on `WORKGROUP_TILES`)."""
    got = NvvmResult(ModuleOp([]), mlir_opt(WORKGROUP_TILES, NVVM_PIPELINE))
    assert sorted(got.ptx) == ["alloca_tile", "attributed_tile", "global_tile"]
    alloca = got.ptx["alloca_tile"]
    assert re.search(r"\.local \.align 4 \.b8 \s*__local_depot\d+\[64\];", alloca)
    assert "cvta.shared" in alloca
    assert got.shared == {"__wg_attributed_tile_0": "64", "tile": "64"}  # none for the alloca
    for name in ("attributed_tile", "global_tile"):
        assert "__local_depot" not in got.ptx[name] and "ld.shared" in got.ptx[name], name
    assert re.search(r"\btile\b", got.ptx["global_tile"])
