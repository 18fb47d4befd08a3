"""From a backend's timed events to a profile's `Step`s, and the profiling variant of a
compiled program.

`variant(program, source)` gives what a profile runs: on c the profiling build
(`compile_c(module, profile=True)`), on cuda and reference the program itself (they time
when given `run(profile=window)`), with the program's `launches()`, read from the
`kernels` pipeline of the recorded tg module. `steps(events, ...)` turns the run's
`Event`s (ns of the monotonic clock, by iteration) into `Step`s of `Span`s that carry
each launch's layers, direction, FLOPs and bytes.

    run, found = variant(program, source)
    result = run(feeders=..., profile=(1, 3))
    for step in steps(result.events, found, "c", first=0, origin_ns=t0):
        print(step.name, [s.name for s in step.spans])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects import memref
from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend import Program, bound_run
from gradfuse.backend.runner import Event, cannot_profile
from gradfuse.dialects import tg
from gradfuse.passes import run_pipeline
from gradfuse.passes.kernel.plan_buffers import nbytes
from gradfuse.profiler.launches import UNATTRIBUTED, Launch, direction_of, launches
from gradfuse.profiler.steps import Span, Step
from gradfuse.profiler.text import sources_text
from gradfuse.provenance import provenance_of

PROFILING = ("reference", "c", "cuda", "cuda-emu")
"""The backends that time a run."""


@dataclass(frozen=True)
class Variant:
    """What a profile runs for one compiled program: `run` (as `Program.run`), the
    program's `launches`, and the bytes of each param global (what a `copy` moves)."""

    program: Program
    run: Callable[..., Any]
    launches: list[Launch]
    copied: dict[str, int]


def variant(program: Program, source: ModuleOp) -> Variant:
    """The profiling variant of `program` (see the module docstring)."""
    if program.backend not in PROFILING:
        cannot_profile(program.backend, (0, 1))
    kernels = source.clone()
    run_pipeline(kernels, "kernels")
    found = launches(kernels)
    if program.backend == "reference":
        return Variant(program, program.run, found, {})
    copied = copy_bytes(program.module)
    if program.backend in ("cuda", "cuda-emu"):
        return Variant(program, program.run, found, copied)
    from gradfuse.backend.c import compile_c

    built = compile_c(program.module, profile=True)
    return Variant(program, replace(program, runner=bound_run(built.run)).run, found, copied)


def _us(ns: int, origin_ns: int) -> float:
    return (ns - origin_ns) / 1000.0


def _launch_span(e: Event, launch: Launch, step: int, origin_ns: int) -> Span:
    sources = sources_text(launch.sources)
    return Span(
        e.name, e.kind, step, _us(e.start_ns, origin_ns), e.duration_ns / 1000.0, launch,
        dict(launch.layer_shares), dict(launch.shares), launch.direction, launch.flops,
        launch.bytes_read, launch.bytes_written, sources, e.grid, e.block, layers_of(launch),
    )  # fmt: skip


def layers_of(launch: Launch) -> tuple[str, ...]:
    """The launch's layers, `UNATTRIBUTED` last when some of its ops are outside modules."""
    outside = any(path is None for path, _ in launch.origins)
    return launch.layers + ((UNATTRIBUTED,) if outside else ())


def _op_span(e: Event, step: int, origin_ns: int) -> Span:
    """A tg op timed by the reference interpreter: its layer and direction from its
    location; a feeder or receiver is a callback named by its key."""
    op = e.op
    assert op is not None
    p = provenance_of(op.location)
    kind, name = "op", e.name
    if isinstance(op, tg.FeederOp | tg.ReceiverOp):
        kind = "feeder" if isinstance(op, tg.FeederOp) else "receiver"
        name = op.key.data
    layer = {} if kind != "op" else {p.module_path or UNATTRIBUTED: 1.0}
    shares = {} if kind != "op" else {p.direction: 1.0}
    direction = direction_of(shares) if shares else "host"
    source = p.source if p.file is not None else ""
    return Span(name, kind, step, _us(e.start_ns, origin_ns), e.duration_ns / 1000.0,
                None, layer, shares, direction, source=source, layers=tuple(layer))  # fmt: skip


def copy_bytes(module: ModuleOp) -> dict[str, int]:
    """Bytes of each `memref.global` of a lowered module, by symbol (what a `copy`
    event names)."""
    return {
        op.sym_name.data: nbytes(op.type) for op in module.ops if isinstance(op, memref.GlobalOp)
    }


def steps(
    events: Sequence[Event],
    found: Sequence[Launch],
    backend: str,
    first: int,
    origin_ns: int,
    copied: Mapping[str, int] | None = None,
) -> list[Step]:
    """The `Step`s of one run's events: iteration i of the outermost loop is step
    `first + i`; a run without a loop (its events at iteration -1) is step `first`.
    Spans come in the order they started; `copied`: bytes by param global (`copy_bytes`)."""
    copied = copied or {}
    spans: dict[int, list[Span]] = {}
    bounds: dict[int, tuple[int, int]] = {}
    for e in events:
        number = first + max(e.iteration, 0)
        if e.kind == "step":
            bounds[number] = (e.start_ns, e.end_ns)
        elif e.kind == "op":
            spans.setdefault(number, []).append(_op_span(e, number, origin_ns))
        elif e.launch is not None:
            spans.setdefault(number, []).append(_launch_span(e, found[e.launch], number, origin_ns))
        else:  # a param copy: `copied` bytes read and written
            start, dur = _us(e.start_ns, origin_ns), e.duration_ns / 1000.0
            n = copied.get(e.name, 0)
            span = Span(e.name, e.kind, number, start, dur, bytes_read=n, bytes_written=n)
            spans.setdefault(number, []).append(span)
    out = []
    for number, (start, end) in sorted(bounds.items()):
        inside = sorted(spans.get(number, []), key=lambda s: s.start_us)
        out.append(
            Step(number, _us(start, origin_ns), (end - start) / 1000.0, tuple(inside), backend)
        )
    return out
