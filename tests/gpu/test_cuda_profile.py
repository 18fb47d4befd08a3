"""The cuda backend's profiling run (`gradfuse.backend.cuda.profile`) on the device of
tests/gpu/conftest.py: the seed MLP under `gradfuse.profiler.profile` with a schedule,
its steps, their kernel spans with launch configurations, and params bitwise equal to
an unprofiled run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from device_under_test import BACKEND_MARKS, ON

import gradfuse
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline
from gradfuse.profiler import profile, schedule
from gradfuse.stats import kernel_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from example_programs import record_mlp  # noqa: E402

pytestmark = BACKEND_MARKS


def _grid(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.strip("()").split(","))


def test_profiling_the_seed_mlp() -> None:
    record_mlp(16, 2, 6)
    plain = gradfuse.execute(ON)
    record_mlp(16, 2, 6)
    module = program().module.clone()
    run_pipeline(module, "cuda")
    per_iteration = kernel_stats(module).kernels_per_iteration
    with profile(schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        profiled = gradfuse.execute(ON)
    assert [s.number for s in prof.steps] == [2, 3]
    for step in prof.steps:
        kernels = [s for s in step.spans if s.kind == "kernel"]
        assert len(kernels) == per_iteration
        assert [s.kind for s in step.spans].count("feeder") == 1
        for span in step.spans:  # nested to the ns (µs floats: their sums may round)
            assert step.start_us <= span.start_us and span.end_us <= step.end_us + 1e-3
            assert span.dur_us >= 0
        for span in kernels:
            assert len(_grid(span.grid)) == 2 and len(_grid(span.block)) == 3
            assert all(d >= 1 for d in _grid(span.grid) + _grid(span.block))
    # The same cubin's kernels, with the same grids and blocks, in the same order on one
    # stream, on the same inputs; profiling only issues them one by one instead of
    # replaying a graph, and none of them uses atomics (the order in which its blocks
    # add up does not vary), so every float32 operation is the same: bitwise equal.
    assert plain.params.keys() == profiled.params.keys()
    for key in plain.params:
        assert np.array_equal(plain.params[key], profiled.params[key]), key
