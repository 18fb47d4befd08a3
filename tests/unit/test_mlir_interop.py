"""Interop: lowered IR parses and verifies in real MLIR (`mlir-opt-22`, Debian's mlir-22-tools).

Skipped when no `mlir-opt-22` / `mlir-opt` is on PATH (`apt-get install mlir-22-tools`).
Both xDSL's custom and generic printing, with locations, are checked, and the
default pipeline's output on every example (examples/*.tg, and the programs that
examples/mlp.py and examples/transformer.py record, at their real sizes):

    ir-opt prog.mlir -p kernel-plan-buffers,convert-kernel-to-gpu -t mlir | mlir-opt-22 --verify-each
    ir-opt examples/linreg.tg -p default -t mlir | mlir-opt-22 --verify-each
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from example_programs import record_mlp, record_reverser, transformer_example
from kernel_programs import PROGRAMS, lower
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

import gradfuse
from gradfuse.passes import PASSES, expand

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
    assert (pipeline == "cuda" and name == "transformer") == ("memref.alloca" in out)
    assert 'loc("forward@' in out and 'loc("backward@' in out
    assert "example_programs.py" in out
