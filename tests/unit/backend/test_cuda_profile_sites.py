"""The cuda backend's profiling sites without a GPU: `profile_sites` numbers the launches
and callbacks of the `cuda` pipeline's host function as `gradfuse.profiler.launches()`
lists them and as the c backend's profiling build numbers its sites; and a kernel's
launch configuration goes from its `Event` into its `Span`."""

from __future__ import annotations

from example_programs import record_conv_step, record_mlp  # tests/unit (conftest)
from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.c.host import main_function, render_program
from gradfuse.backend.cuda.profile import profile_sites
from gradfuse.backend.runner import Event
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline
from gradfuse.profiler import launches
from gradfuse.profiler.build import steps


def _lowered(pipeline: str) -> ModuleOp:
    module = program().module.clone()
    run_pipeline(module, pipeline)
    return module


def _check_sites() -> list[tuple[str, str, int]]:
    """The recorded program's cuda sites, checked against launches() and the c build."""
    sites = profile_sites(main_function(_lowered("cuda")))
    found = [(s.kind, s.name, s.launch) for s in sites]
    records = launches(_lowered("kernels"))
    host = {"feeder", "receiver"}
    assert found == [
        (r.op if r.op in host else "kernel", r.symbol, i) for i, r in enumerate(records)
    ]
    c_sites = render_program(_lowered("cpu"), profile=True).sites
    assert found == [(s.kind, s.name, s.launch) for s in c_sites if s.launch is not None]
    return found


def test_a_conv_nets_sites_with_a_receiver_in_the_loop() -> None:
    record_conv_step(3)
    found = _check_sites()
    assert [k for k, _, _ in found] == ["feeder", "kernel", "kernel", "receiver"]
    assert (found[0][1], found[-1][1]) == ("images", "log")


def test_the_seed_mlps_sites_with_a_receiver_after_the_loop() -> None:
    record_mlp(16, 2, 5)
    found = _check_sites()
    assert found[0][0] == "feeder" and found[-1] == ("receiver", "saving params", len(found) - 1)


def test_sites_are_the_ops_of_the_host_function() -> None:
    record_conv_step(2)
    main = main_function(_lowered("cuda"))
    sites = profile_sites(main)
    assert all(s.op.parent_op() is not None for s in sites)
    assert {s.op for s in sites} <= set(main.walk())


def test_a_kernels_grid_and_block_reach_its_span() -> None:
    record_mlp(16, 2, 2)
    found = launches(_lowered("kernels"))
    kernel = next(i for i, r in enumerate(found) if r.op not in ("feeder", "receiver"))
    launched = Event(kernel, "kernel", found[kernel].symbol, kernel, 0, 2_000, 3_000,
                     grid="(64, 1)", block="(256, 1, 1)")  # fmt: skip
    events = [Event(0, "step", "loop 0", None, 0, 1_000, 9_000), launched]
    (step,) = steps(events, found, "cuda", first=0, origin_ns=0)
    (span,) = step.spans
    assert (span.grid, span.block, span.dur_us) == ("(64, 1)", "(256, 1, 1)", 1.0)
    assert Event(0, "copy", "p", None, 0, 0, 1).grid == ""
