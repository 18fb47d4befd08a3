"""`gradfuse.profiler.trace`: the Chrome trace of a profiled c run (a conv net whose loop
saves params for a receiver: kernel, gpu_memcpy and cpu_op events) and of a reference run
is valid trace-event JSON in torch.profiler's shape, its events nest in their
`ProfilerStep#N` and never overlap partially on one thread; `tensorboard_trace_handler`
writes one `*.pt.trace.json[.gz]` per saved cycle; and TensorBoard's profiler plugin
(`torch-tb-profiler`, a dev extra) loads that directory with its own `RunLoader` and
finds our steps, their times and their parts (Kernel, Memcpy, DataLoader, ...)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from example_programs import record_conv_step  # tests/unit (conftest puts it on the path)

import gradfuse
from gradfuse.profiler import Step, profile, schedule, tensorboard_trace_handler
from gradfuse.profiler.overview import overview
from gradfuse.profiler.trace import chrome_trace

pytestmark = pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")  # the plugin

CATEGORIES = {"kernel", "gpu_memcpy", "cpu_op", "user_annotation"}
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER = "enumerate(DataLoader)#Feeder[images].__next__"


@pytest.fixture(scope="module")
def c_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[profile, Path]:
    """A profiled c run of 8 steps, 2 saved cycles of 2 steps each written by
    `tensorboard_trace_handler` to the returned directory."""
    directory = tmp_path_factory.mktemp("tb") / "conv"
    record_conv_step(8, feeder_sleep=0.0002)
    cycles = schedule(wait=1, warmup=1, active=2, repeat=2)
    with profile(schedule=cycles, on_trace_ready=tensorboard_trace_handler(directory)) as prof:
        gradfuse.execute("c")
    return prof, directory


@pytest.fixture(scope="module")
def reference_run() -> profile:
    """A profiled reference run of 2 steps (every tg op a `cpu_op`)."""
    record_conv_step(2)
    with profile() as prof:
        gradfuse.execute("reference")
    return prof


def _exported(prof: profile, path: Path) -> dict[str, Any]:
    prof.export_chrome_trace(path)
    return json.loads(path.read_text())


def partial_overlaps(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of X events on one (pid, tid) that overlap without one nesting in the
    other (the trace viewers draw a thread's events as a stack of nested slices)."""
    found = []
    threads: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in events:
        threads.setdefault((e["pid"], e["tid"]), []).append(e)
    for on_thread in threads.values():
        on_thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_: list[dict[str, Any]] = []  # the enclosing events, innermost last
        for e in on_thread:
            while open_ and open_[-1]["ts"] + open_[-1]["dur"] <= e["ts"]:
                open_.pop()
            if open_ and e["ts"] + e["dur"] > open_[-1]["ts"] + open_[-1]["dur"]:
                found.append((open_[-1]["name"], e["name"]))
            open_.append(e)
    return found


def check_trace(trace: dict[str, Any], steps: list[Step]) -> dict[str, list[dict[str, Any]]]:
    """Asserts the issue's rules for a trace of `steps`; returns its X events by category."""
    assert {"schemaVersion", "traceEvents", "displayTimeUnit"} <= trace.keys()
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["ph"] for e in trace["traceEvents"]} <= {"X", "M"}
    for e in xs:
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["ts"], int | float) and isinstance(e["dur"], int | float), e
        assert e["dur"] >= 0, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert e["cat"] in CATEGORIES, e
    by_cat: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
    for e in xs:
        by_cat[e["cat"]].append(e)
    marks = by_cat["user_annotation"]
    assert [int(STEP_NAME.match(e["name"]).group(1)) for e in marks] == [s.number for s in steps]
    for e in xs:
        if e["cat"] == "user_annotation":
            continue
        assert {"layer", "direction", "flops", "bytes_read", "bytes_written"} <= e["args"].keys()
        inside = [
            m for m in marks if m["ts"] <= e["ts"] and e["ts"] + e["dur"] <= m["ts"] + m["dur"]
        ]
        assert len(inside) == 1, (e["name"], e["ts"], e["dur"])
    # the events within each step's interval are the trace names of its spans
    for step, mark in zip(steps, marks, strict=True):
        end = mark["ts"] + mark["dur"]
        names = [e["name"] for e in xs if e not in marks and mark["ts"] <= e["ts"] <= end]
        assert sorted(names) == sorted(s.trace_name for s in step.spans)
    assert partial_overlaps(xs) == []
    return by_cat


def test_the_c_trace_has_torchs_shape_and_its_events_nest(c_run, tmp_path: Path) -> None:
    prof, _ = c_run
    trace = _exported(prof, tmp_path / "c.json")
    by_cat = check_trace(trace, prof.steps)
    assert all(by_cat[c] for c in CATEGORIES), {c: len(v) for c, v in by_cat.items()}
    for e in by_cat["kernel"]:
        assert e["args"]["layer"] != "-" and e["args"]["flops"] > 0, e
        assert re.match(r"^(fprop|bprop|optimizer)\b", e["args"]["direction"]), e
    host = {e["name"] for e in by_cat["cpu_op"]}
    assert host == {DATALOADER, "log"}
    assert all(e["name"].startswith("Memcpy DtoD (param ") for e in by_cat["gpu_memcpy"])
    kernel_tids = {e["tid"] for e in by_cat["kernel"] + by_cat["gpu_memcpy"]}
    host_tids = {e["tid"] for e in by_cat["cpu_op"] + by_cat["user_annotation"]}
    assert len(kernel_tids) == len(host_tids) == 1 and kernel_tids != host_tids
    assert trace == json.loads(json.dumps(chrome_trace(prof.steps)))  # the file is the dict


def test_the_reference_trace_has_torchs_shape_and_its_events_nest(
    reference_run, tmp_path: Path
) -> None:
    prof = reference_run
    by_cat = check_trace(_exported(prof, tmp_path / "ref.json"), prof.steps)
    assert not by_cat["kernel"] and not by_cat["gpu_memcpy"]  # every tg op is a cpu_op
    names = {e["name"] for e in by_cat["cpu_op"]}
    assert {DATALOADER, "log", "tg.dot"} <= names
    assert [e["name"] for e in by_cat["user_annotation"]] == ["ProfilerStep#0", "ProfilerStep#1"]


def test_a_partial_overlap_on_one_thread_is_found() -> None:
    def x(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
        return {"name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    nested = [x("a", 0, 10), x("b", 1, 3), x("c", 4, 6), x("d", 10, 2)]
    assert partial_overlaps(nested) == []
    assert partial_overlaps([x("a", 0, 10), x("b", 5, 10)]) == [("a", "b")]
    assert partial_overlaps([x("a", 0, 10), x("b", 5, 10, tid=2)]) == []


def test_the_handler_writes_one_file_per_saved_cycle(c_run) -> None:
    prof, directory = c_run
    files = sorted(directory.iterdir())
    assert len(files) == 2 and all(f.name.endswith(".pt.trace.json") for f in files), files
    cycles = [json.loads(f.read_text()) for f in files]
    assert [[e["name"] for e in t["traceEvents"] if e.get("cat") == "user_annotation"]
            for t in cycles] == [["ProfilerStep#2", "ProfilerStep#3"],
                                 ["ProfilerStep#6", "ProfilerStep#7"]]  # fmt: skip
    for trace, numbers in zip(cycles, ([2, 3], [6, 7]), strict=True):
        steps = [s for s in prof.all_steps if s.number in numbers]
        check_trace(trace, steps)
    assert [s.number for s in prof.steps] == [6, 7]  # the last saved cycle


def test_the_gzip_handler_writes_the_same_trace(tmp_path: Path) -> None:
    record_conv_step(2)
    with profile(on_trace_ready=tensorboard_trace_handler(tmp_path, "w", use_gzip=True)) as prof:
        gradfuse.execute("c")
    (file,) = tmp_path.iterdir()
    assert re.match(r"^w\.\d+\.pt\.trace\.json\.gz$", file.name), file.name
    trace = json.loads(gzip.decompress(file.read_bytes()))
    assert trace == json.loads(json.dumps(chrome_trace(prof.steps)))
    check_trace(trace, prof.steps)
    if importlib.util.find_spec("torch_tb_profiler") is not None:  # the plugin reads .gz
        from torch_tb_profiler.profiler.data import RunProfileData

        data = RunProfileData.parse("w", None, str(file), str(tmp_path))
        assert data.steps_names == [str(s.number) for s in prof.steps]


# -- TensorBoard's profiler plugin ------------------------------------------------------
# The plugin's overview: each step is its ProfilerStep#N's host interval (it moves a step's
# end to its last kernel only for kernels that a cuda runtime call of the step launched,
# and our traces have no runtime events), and each instant of it goes to the first role
# covering it: Kernel, Memcpy, Memset, Communication, Runtime, DataLoader (an op named
# `enumerate(DataLoader)#...__next__`), CPU Exec (any other cpu_op), else Other.
PLUGIN_PARTS = {"Kernel": 0, "Memcpy": 1, "Memset": 2, "Communication": 3, "Runtime": 4,
                "DataLoader": 5, "CPU Exec": 6, "Other": 7}  # fmt: skip
"""Our overview's parts -> their index in the plugin's `ProfileRole` (Total is 8)."""
SHOWN_PARTS = [p for p in PLUGIN_PARTS if p != "Communication"]
"""The parts the plugin's overview shows for a run that is not distributed."""


def _plugin_costs(costs: Any) -> dict[str, float]:
    return {part: costs.costs[i] for part, i in PLUGIN_PARTS.items()} | {"Total": costs.costs[8]}


def _our_costs(b: Any) -> dict[str, float]:
    return dict(b.parts) | {"Total": b.total_us}


def test_tensorboards_plugin_loads_the_directory_and_agrees_on_step_times(c_run) -> None:
    pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler import io as tb_io
    from torch_tb_profiler.profiler.loader import RunLoader

    prof, directory = c_run
    with tb_io.Cache(str(directory.parent / "cache")) as cache:
        run = RunLoader("conv", str(directory), cache).load()
    profiles = sorted(run.profiles.items(), key=lambda kv: int(kv[0][1]))
    assert [span for (_, span), _ in profiles] == ["1", "2"]  # a span per saved cycle
    for (_, span), loaded in profiles:
        numbers = [2, 3] if span == "1" else [6, 7]
        ours = overview([s for s in prof.all_steps if s.number in numbers])
        rows = loaded.overview["steps"]["rows"]
        assert [row[0] for row in rows] == [str(n) for n in numbers]
        # a row is the step, then a (µs, tooltip) pair per part in our overview's order
        for row, b in zip(rows, ours.steps, strict=True):
            assert row[1::2] == pytest.approx([b.parts[p] for p in SHOWN_PARTS], abs=1.0)
            total = float(re.search(r"Total: ([\d.e+-]+)us", row[2]).group(1))
            assert total == pytest.approx(b.total_us, abs=1.0)
        (average,) = loaded.overview["performance"]
        assert average["name"] == "Average Step Time"
        # the plugin rounds the average step's µs to integers
        assert average["value"] == pytest.approx(ours.average.total_us, abs=1.0)
        parts = {c["name"]: c["value"] for c in average["children"]}
        assert parts == pytest.approx({p: ours.average.parts[p] for p in SHOWN_PARTS}, abs=1.0)
        assert ours.average.parts["DataLoader"] > 0  # our feeder is the plugin's DataLoader


def test_the_plugins_step_parts_are_ours_to_a_microsecond(c_run, reference_run) -> None:
    """The plugin's parser (`RunProfileData`) on the c trace gives our overview's parts;
    on the reference trace, where every tg op is a cpu_op, its CPU Exec is our Kernel
    (the tg ops) plus our CPU Exec (the receiver)."""
    pytest.importorskip("torch_tb_profiler")
    from torch_tb_profiler.profiler.data import RunProfileData

    for prof in (c_run[0], reference_run):
        data = RunProfileData.from_json("w", None, chrome_trace(prof.steps))
        ours = overview(prof.steps)
        assert data.steps_names == [str(s.number) for s in prof.steps]
        for theirs, b in zip([*data.steps_costs, data.avg_costs], [*ours.steps, ours.average]):
            expected = _our_costs(b)
            if prof.steps[0].backend == "reference":
                expected["CPU Exec"] += expected.pop("Kernel")
                expected["Kernel"] = 0.0
            assert _plugin_costs(theirs) == pytest.approx(expected, abs=1.0)
        assert data.avg_costs.costs[PLUGIN_PARTS["DataLoader"]] > 0
