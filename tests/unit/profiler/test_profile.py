"""`gradfuse.profiler.profile` around `execute()`: the steps a schedule records, every
kernel row against the listing, the overview's parts against the step's time, a slow
feeder named by a recommendation, params unchanged by profiling, and misuse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from compiled import needs_mpicc  # tests/unit
from example_programs import record_conv_step, record_mlp  # tests/unit (conftest)
from listing_origins import fuses

import gradfuse
from gradfuse import Feeder, Receiver, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.profiler import profile, schedule
from gradfuse.profiler.launches import UNATTRIBUTED
from gradfuse.profiler.overview import CATEGORIES, overview


def test_the_seed_mlp_records_the_scheduled_steps_with_every_kernel() -> None:
    record_mlp(16, 2, 6)
    compiled = gradfuse.compile("c")
    with profile(schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        gradfuse.execute("c")
    assert [s.name for s in prof.steps] == ["ProfilerStep#2", "ProfilerStep#3"]
    for step in prof.steps:
        assert len(step.kernels()) == compiled.kernels_per_iteration
        assert [s.kind for s in step.spans if s.kind != "kernel"] == ["feeder"]
        assert all(step.start_us <= s.start_us and s.end_us <= step.end_us for s in step.spans)


@pytest.mark.parametrize("backend", ["c", "reference", "cuda"])
def test_every_kernel_row_has_the_layers_and_directions_of_its_fuses_line(backend: str) -> None:
    record_conv_step(3)
    listing = fuses(gradfuse.compile(backend).listing())
    with profile(schedule=schedule(wait=0, warmup=0, active=1, repeat=1)) as prof:
        gradfuse.execute(backend)
    (step,) = prof.steps
    assert step.number == 0 and step.backend == backend
    for span in step.kernels():
        assert span.layers, f"{span.name} has no layer"
        if backend == "reference":  # one row per tg op, its own origin
            assert len(span.layers) == 1 and len(span.shares) == 1
            continue
        want = set().union(*(listing[w.symbol] for w in span.launch.kernels))
        pairs = {(UNATTRIBUTED if layer is None else layer, d) for layer, d in want}
        assert set(span.layers) == {layer for layer, _ in pairs}, span.name
        assert set(span.launch.origins) == want, span.name
        assert set(span.shares) <= {d for _, d in want}, span.name  # directions with FLOPs
    if backend != "reference":
        assert sorted(w.symbol for s in step.kernels() for w in s.launch.kernels) == sorted(listing)


@pytest.mark.parametrize("backend", ["c", "reference", "cuda"])
def test_the_overview_parts_sum_to_the_step_and_layers_to_the_kernel_time(backend: str) -> None:
    record_conv_step(4)
    with profile() as prof:
        gradfuse.execute(backend)
    assert [s.number for s in prof.steps] == [0, 1, 2, 3]
    view = overview(prof.steps)
    for step, parts in zip(prof.steps, view.steps):
        assert abs(sum(parts.parts.values()) - step.dur_us) < 1.0
        kernel_us = sum(s.dur_us for s in step.kernels())
        assert parts.parts["Kernel"] <= kernel_us + 1e-6
    layers = prof.key_averages(group_by="layer")
    kernel_total = sum(s.dur_us for st in prof.steps for s in st.kernels())
    by_layer = sum(r.self_time_total_us for r in layers if r.key not in ("host", "ProfilerStep*"))
    assert abs(by_layer - kernel_total) < 1e-6 * max(kernel_total, 1)
    assert list(view.average.parts) == list(CATEGORIES)


def test_a_slow_feeder_is_data_loading_and_a_recommendation_names_it() -> None:
    record_conv_step(3, feeder_sleep=0.02)
    with profile(schedule=schedule(wait=1, warmup=0, active=2)) as prof:
        gradfuse.execute("c")
    view = prof.overview()
    assert len(view.steps) == 2
    assert all(b.parts["DataLoader"] >= 20_000 for b in view.steps)
    assert any('feeder "images"' in r and "prefetch" in r for r in view.recommendations)
    assert 'feeder "images"' in str(view)


@pytest.mark.parametrize("backend", [pytest.param("c", marks=needs_mpicc), "cuda-emu"])
def test_an_all_reduce_is_a_communication_span_of_its_step(monkeypatch, backend: str) -> None:
    """DistributedDataParallel's gradient all-reduce (a world of one: the timed site
    copies) is one span a step, `mpi:all_reduce mean` in the trace as torch names a
    collective, and Communication in the overview; on cuda a device event pair around
    it on the stream, and the launches keep their rows."""
    import gradfuse.distributed as dist
    from gradfuse.backend import mpi
    from gradfuse.nn import SGD, Linear
    from gradfuse.profiler.trace import chrome_trace

    monkeypatch.setattr(mpi, "_world", mpi.World(0, 1, 0, None, "python"))
    model = dist.DistributedDataParallel(Linear(8, 8))
    opt = SGD(model.parameters(), lr=0.1)
    x = Feeder(lambda: np.ones((4, 8), np.float32), shape=[4, 8], name="x")

    def step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    ir_for(range(3), step)
    kernels = gradfuse.compile(backend).kernels_per_iteration
    with profile() as prof:
        gradfuse.execute(backend)
    view = prof.overview()
    for step_, parts in zip(prof.steps, view.steps):
        (span,) = [s for s in step_.spans if s.kind == "allreduce"]
        assert span.name == "all_reduce mean" and span.trace_name == "mpi:all_reduce mean"
        assert 0 < parts.parts["Communication"] <= span.dur_us + 1e-6
        assert len(step_.kernels()) == kernels
    names = [e["name"] for e in chrome_trace(prof.steps)["traceEvents"]]
    assert names.count("mpi:all_reduce mean") == 3
    assert "Communication" in str(view)


def test_profiling_leaves_the_params_bitwise_equal() -> None:
    record_conv_step(3)
    gradfuse.execute("c")
    plain = {k: p.data.copy() for k, p in gradfuse.frontend.recorder.program().params.items()}
    record_conv_step(3)
    with profile():
        gradfuse.execute("c")
    profiled = {k: p.data for k, p in gradfuse.frontend.recorder.program().params.items()}
    assert plain.keys() == profiled.keys()
    assert all(np.array_equal(plain[k], profiled[k]) for k in plain)


def test_steps_are_numbered_across_runs_and_each_cycle_is_handed_over() -> None:
    saved: list[list[int]] = []
    rule = schedule(wait=1, warmup=0, active=2)  # records 1, 2; 4, 5; 7, 8
    with profile(schedule=rule, on_trace_ready=lambda p: saved.append(
        [s.number for s in p.steps])) as prof:  # fmt: skip
        for _ in range(2):
            record_mlp(8, 2, 4)
            gradfuse.execute("c")
    assert saved == [[1, 2], [4, 5], [7]] and prof.step_num == 8  # [7]: cut short at exit
    assert [s.number for s in prof.all_steps] == [1, 2, 4, 5, 7]


def test_tables_name_every_launch_and_sort_as_asked(tmp_path: Path) -> None:
    record_mlp(16, 2, 3)
    with profile(with_flops=True) as prof:
        gradfuse.execute("c")
    table = prof.kernel_table(step=1)
    lines = table.splitlines()
    assert lines[0].startswith("ProfilerStep#1:") and lines[1].split()[:3] == [
        "Idx",
        "Direction",
        "Layer",
    ]
    assert len(lines) == 2 + len(prof.steps[1].spans)
    rows = prof.key_averages()
    by_name = {r.key: r for r in rows}
    kernel = next(s for s in prof.steps[0].spans if s.kind == "kernel")
    assert by_name[kernel.name].count == 3 and by_name[kernel.name].flops == 3 * kernel.flops
    text = rows.table(sort_by="count", row_limit=2).splitlines()
    assert len(text) == 3 and "FLOPs" in text[0]
    assert rows.table(sort_by="self_cuda_time_total")  # torch's key names sort too
    prof.export_timeline(tmp_path / "step.html", step=2)
    page = (tmp_path / "step.html").read_text()
    assert "<svg" in page and "ProfilerStep#2" in page and kernel.name in page


def test_misuse_gets_one_clear_error() -> None:
    record_mlp(8, 2, 2)
    with profile() as prof:
        with pytest.raises(GradfuseError, match="prof.step"):
            prof.step()
        with pytest.raises(GradfuseError, match="numpy backend cannot profile"):
            gradfuse.execute("numpy")
    with pytest.raises(GradfuseError, match="recorded no step"):
        prof.key_averages()
    with pytest.raises(GradfuseError, match="not running"):
        prof.stop()
    with pytest.raises(GradfuseError, match="active"):
        schedule(wait=1, warmup=0, active=0)
    record_mlp(8, 2, 2)
    with profile() as prof:
        gradfuse.execute("c")
    with pytest.raises(GradfuseError, match=r"step 7 was not recorded \(recorded: 0, 1\)"):
        prof.kernel_table(step=7)
    with pytest.raises(GradfuseError, match="sort by one of"):
        prof.key_averages().table(sort_by="speed")


def test_two_outermost_loops_are_refused_with_their_places() -> None:
    record_mlp(8, 2, 2)
    ir_for(
        range(2), lambda: Receiver(lambda *a: None, [Feeder(np.zeros(2, np.float32), shape=[2])])
    )
    with profile(), pytest.raises(GradfuseError, match="at most one outermost ir_for"):
        gradfuse.execute("c")
