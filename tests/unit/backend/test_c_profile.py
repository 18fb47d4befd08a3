"""The c backend's profiling build (`gradfuse.backend.c.profile`): the default source
unchanged, params bitwise equal with profiling on, the window, the nesting of events in
their step, the sites against `gradfuse.profiler.launches`, and a slow feeder's time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from example_programs import record_conv_step, record_mlp  # tests/unit (conftest)
from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.c import compile_c
from gradfuse.backend.c.host import render_program
from gradfuse.backend.runner import Event
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline
from gradfuse.profiler import launches
from gradfuse.stats import kernel_stats


def _lowered(pipeline: str = "cpu") -> ModuleOp:
    module = program().module.clone()
    run_pipeline(module, pipeline)
    return module


def _inputs() -> dict[str, Any]:
    """Feeders, receivers and fresh copies of the initial params of the recording."""
    prog = program()
    params = {k: p.data.copy() for k, p in prog.params.items()}
    return {"feeders": prog.feeders, "receivers": prog.receivers, "params": params}


def _by_step(events: list[Event]) -> dict[int, list[Event]]:
    steps: dict[int, list[Event]] = {}
    for e in events:
        steps.setdefault(e.iteration, []).append(e)
    return steps


def test_the_default_source_is_unchanged_by_the_flag() -> None:
    record_mlp(16, 2, 5)
    module = _lowered()
    default = render_program(module).source
    assert render_program(module, profile=False).source == default
    assert "GF_TIMED" not in default and "gf_now" not in default and "gf_event" not in default
    profiled = render_program(module, profile=True)
    assert profiled.source.count("GF_TIMED(") == 1 + len(profiled.sites) - 1  # the macro + sites
    assert "clock_gettime(CLOCK_MONOTONIC" in profiled.source


@pytest.mark.parametrize("record", ["mlp", "conv"])
def test_profiled_params_are_bitwise_equal(record: str) -> None:
    if record == "mlp":
        record_mlp(16, 2, 5)
    else:
        record_conv_step(5)
    module = _lowered()
    plain = compile_c(module).run(**_inputs())
    profiled = compile_c(module, profile=True).run(**_inputs(), profile=(1, 3))
    assert profiled.events and not plain.events
    assert plain.params.keys() == profiled.params.keys()
    for key in plain.params:
        assert np.array_equal(plain.params[key], profiled.params[key]), key


def test_sites_map_to_launches_in_program_order() -> None:
    record_mlp(16, 2, 5)
    records = launches(_lowered("kernels"))
    program_ = compile_c(_lowered(), profile=True)
    mapped = [s for s in program_.sites if s.launch is not None]
    assert [s.launch for s in mapped] == list(range(len(records)))
    assert [s.name for s in mapped] == [r.symbol for r in records]  # ['feeder', 'r0', 'g6', ...]
    host = {"feeder", "receiver"}
    assert [s.kind for s in mapped] == [r.op if r.op in host else "kernel" for r in records]
    events = program_.run(**_inputs(), profile=(1, 3)).events
    for e in events:
        if e.launch is not None:
            assert e.name == records[e.launch].symbol


@pytest.mark.parametrize("record", ["mlp", "conv"])
def test_a_window_records_its_steps_and_each_step_nests_its_events(record: str) -> None:
    if record == "mlp":
        record_mlp(16, 2, 5)
    else:
        record_conv_step(5)
    module = _lowered()
    per_iteration = kernel_stats(module).kernels_per_iteration
    program_ = compile_c(module, profile=True)
    events = program_.run(**_inputs(), profile=(1, 3)).events
    steps = _by_step(events)
    assert sorted(steps) == [1, 2]
    callbacks = [s for s in program_.sites if s.kind in ("feeder", "receiver") and s.loop == 0]
    copies = [s for s in program_.sites if s.kind == "copy"]
    assert bool(copies) == (record == "conv")  # the conv step saves params for its receiver
    for inside in steps.values():
        kinds = [e.kind for e in inside]
        assert kinds.count("step") == 1 and kinds[-1] == "step"
        assert kinds.count("kernel") == per_iteration
        assert kinds.count("feeder") + kinds.count("receiver") == len(callbacks)
        assert kinds.count("copy") == len(copies)
        step = inside[-1]
        timed = sorted(inside[:-1], key=lambda e: e.start_ns)
        assert all(e.start_ns <= e.end_ns for e in inside)
        assert all(step.start_ns <= e.start_ns and e.end_ns <= step.end_ns for e in timed)
        assert all(a.end_ns <= b.start_ns for a, b in zip(timed, timed[1:])), "no overlap"
    assert steps[1][-1].end_ns <= steps[2][0].start_ns


def test_sites_outside_the_loop_are_iteration_minus_one() -> None:
    record_mlp(16, 2, 5)
    events = compile_c(_lowered(), profile=True).run(**_inputs(), profile=(-1, 0)).events
    assert [(e.kind, e.name, e.iteration) for e in events] == [("receiver", "saving params", -1)]


def test_a_slow_feeder_shows_its_time() -> None:
    record_conv_step(3, feeder_sleep=0.02)
    events = compile_c(_lowered(), profile=True).run(**_inputs(), profile=(0, 2)).events
    fed = [e for e in events if e.kind == "feeder"]
    assert [e.name for e in fed] == ["images", "images"]
    assert all(e.duration_ns >= 20_000_000 for e in fed)
    steps = [e for e in events if e.kind == "step"]
    assert all(s.duration_ns >= 20_000_000 for s in steps)


def test_profiling_needs_the_profiling_build() -> None:
    record_mlp(16, 2, 2)
    with pytest.raises(GradfuseError, match=r"compile_c\(module, profile=True\)"):
        compile_c(_lowered()).run(**_inputs(), profile=(0, 1))


@pytest.mark.parametrize("window", [(3, 1), (2, 2), (-2, 1), (0.5, 2)])
def test_an_empty_or_malformed_window_is_an_error(window: tuple) -> None:
    record_mlp(16, 2, 2)
    with pytest.raises(GradfuseError, match="the window is"):
        compile_c(_lowered(), profile=True).run(**_inputs(), profile=window)
