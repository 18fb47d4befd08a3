"""`ir-run --profile [--trace FILE]` and the examples' `--profile`: the kernel table,
the time per layer and the overview printed, the trace written; misuse refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from example_programs import load_example  # tests/unit (conftest puts it on the path)

import gradfuse
from gradfuse.tools.ir_run import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
LINREG = [str(EXAMPLES / "linreg.tg"), "--inputs", str(EXAMPLES / "linreg.npz")]


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_ir_run_profile_prints_the_tables_and_writes_the_trace(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "linreg.json"
    assert main([*LINREG, "--backend", backend, "--profile", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ProfilerStep#0: ") and f"({backend})" in out.splitlines()[0]
    assert "Idx  Direction  Layer" in out and "Recommendations:" in out
    data = json.loads(trace.read_text())
    steps = [e for e in data["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) == 20  # linreg.tg's loop: one step per iteration
    assert "param.w" in out or "result0" in out  # the run's outputs still follow


def test_ir_run_profile_misuse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LINREG, "--trace", "x.json"]) == 1
    assert "--trace needs --profile" in capsys.readouterr().err
    assert main([*LINREG, "--backend", "numpy", "--profile"]) == 1
    assert "numpy backend cannot profile" in capsys.readouterr().err


@pytest.mark.slow  # two C builds of DCGAN (the default and the profiling one): ~50 s cold
def test_the_dcgan_example_profiles_its_step_on_c(capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example("dcgan", BATCH=2, NGF=4, NDF=4)
    example.record(3, log_every=1)
    per_step = gradfuse.compile("c").kernels_per_iteration
    gradfuse.reset()
    prof = example.profile_steps(steps=3, backend="c")
    out = capsys.readouterr().out
    (step,) = prof.steps  # schedule(wait=1, warmup=1, active=3) over 3 steps: step 2
    assert step.name == "ProfilerStep#2" and f"{step.name}: " in out
    assert len(step.kernels()) == per_step
    assert all(s.layers for s in step.kernels())
    assert {"feeder", "receiver", "copy"} <= {s.kind for s in step.spans}
    assert "Recommendations:" in out


@pytest.mark.parametrize("name", ["dcgan", "transformer"])
def test_the_examples_profile_on_the_reference_backend(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python examples/<name>.py --profile` runs `profile_steps()`: here on the reference
    interpreter at small sizes (no C build), one row per tg op of the step."""
    small = {
        "dcgan": {"BATCH": 2, "NGF": 4, "NDF": 4},
        "transformer": {"BATCH": 2, "D_MODEL": 8, "HEADS": 2, "FF": 16, "LAYERS": 1},
    }[name]
    gradfuse.reset()
    prof = load_example(name, **small).profile_steps(steps=3, backend="reference")
    out = capsys.readouterr().out
    (step,) = prof.steps
    assert f"{step.name}: " in out and "(reference)" in out and "Recommendations:" in out
    ops = [s for s in step.spans if s.kind == "op"]
    assert ops and all(len(s.layers) == 1 for s in ops)
    assert {"forward", "backward", "optimizer"} <= {d for s in ops for d in s.shares}
