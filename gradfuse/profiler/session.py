"""`profile`: torch.profiler's context manager for gradfuse programs.

Inside `with profile(...) as prof:`, every `execute()` (or `compile().run()`) runs the
program's profiling variant: the c backend's profiling build, the cuda backend with an
event pair per launch, or the reference interpreter timing each tg op. A step is one
iteration of the program's outermost `ir_for`, numbered across the runs of the profile
(`ProfilerStep#N`); the schedule decides which steps are recorded, and the window that
covers them is handed to the compiled program, since the loop runs there.

    from gradfuse.profiler import profile, schedule, tensorboard_trace_handler
    with profile(schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler("runs/dcgan")) as prof:
        execute()
    print(prof.key_averages().table(sort_by="self_time_total", row_limit=20))
    print(prof.kernel_table())

As with torch, the tables and the trace show the steps of the last saved cycle
(`prof.steps`); `prof.all_steps` keeps every recorded step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend import Program
from gradfuse.backend.runner import Event, RunResult, entry_function
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.profiler import build
from gradfuse.profiler.schedule import ProfilerAction, Schedule, always, recorded
from gradfuse.profiler.steps import Step, pick

_ACTIVE: list[profile] = []


def active() -> profile | None:
    """The innermost running `profile`, else None (what `execute()` asks)."""
    return _ACTIVE[-1] if _ACTIVE else None


def outer_loops(source: ModuleOp, entry: str = "main") -> list[tg.ForOp]:
    """The outermost `tg.for`s of the recorded program's entry function."""
    return [op for op in entry_function(source, entry).body.block.ops if isinstance(op, tg.ForOp)]


class profile:  # noqa: N801 (torch.profiler's name)
    """Profiles the gradfuse programs run inside it; see the module docstring.

    `schedule` (default: record every step) and `on_trace_ready` (called with this
    profile at the end of every recorded cycle) work as torch's. `with_flops` adds the
    FLOPs columns to `key_averages().table()`. torch's other keywords (`activities`,
    `record_shapes`, `profile_memory`, `with_stack`, `with_modules`) are taken for
    compatibility: gradfuse always records shapes (Params), layers and sources.
    """

    def __init__(
        self,
        *,
        schedule: Schedule | None = None,
        on_trace_ready: Callable[[profile], Any] | None = None,
        with_flops: bool = False,
        activities: Sequence[Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_modules: bool = False,
    ):
        if schedule is not None and not callable(schedule):
            raise GradfuseError("profile(schedule=...) takes gradfuse.profiler.schedule(...)")
        self.schedule: Schedule = schedule or always
        self.on_trace_ready = on_trace_ready
        self.with_flops = with_flops
        self.step_num = 0
        """Steps seen so far (recorded or not): the next step's number."""
        self.steps: list[Step] = []
        """The last saved cycle's steps: what tables, overview and traces show."""
        self.all_steps: list[Step] = []
        self._pending: list[Step] = []
        self._origin_ns = 0
        self._running = False
        self._builds: dict[int, build.Variant] = {}  # by id(program); each keeps its own

    # -- torch's life cycle ------------------------------------------------------------
    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._running:
            raise GradfuseError("this profile is already running (start() twice)")
        self._running = True
        self._origin_ns = time.monotonic_ns()
        _ACTIVE.append(self)

    def stop(self) -> None:
        """Ends profiling; a cycle cut short is saved, as torch saves it."""
        if not self._running:
            raise GradfuseError("this profile is not running (stop() without start())")
        self._running = False
        _ACTIVE.remove(self)
        self._save()

    def step(self) -> None:
        """torch's `prof.step()` has no place here: the steps are the iterations of the
        outermost `ir_for`, which run inside the compiled program."""
        raise GradfuseError(
            "prof.step() is not needed in gradfuse: a step is one iteration of the"
            " outermost ir_for, and the compiled program marks them itself"
        )

    def _save(self) -> None:
        if not self._pending:
            return
        self.steps, self._pending = self._pending, []
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # -- running a program ---------------------------------------------------------------
    def run(self, program: Program, source: ModuleOp, **kwargs: Any) -> RunResult:
        """Runs `program` (compiled from the tg module `source`) with the steps this
        profile's schedule records timed; called by `Compiled.run` inside the profile."""
        loops = outer_loops(source, kwargs.get("entry", "main"))
        if len(loops) > 1:
            where = ", ".join(str(position_of(op.location) or "?") for op in loops)
            raise GradfuseError(
                f"profiling needs at most one outermost ir_for, and this program has"
                f" {len(loops)} (at {where}): profile each loop in its own execute()"
            )
        trips = loops[0].trip_count if loops else 1
        first = self.step_num
        steps = recorded(self.schedule, first, first + trips)
        if loops:
            window = (steps[0] - first, steps[-1] + 1 - first) if steps else None
        else:
            window = (-1, 0) if steps else None
        built = self._variant(program, source)
        kwargs = {**kwargs, "profile": window} if window else kwargs
        start = time.monotonic_ns()
        result = built.run(**kwargs)
        end = time.monotonic_ns()
        self.step_num += trips
        if window is None:
            return result
        events: list[Event] = result.events
        if not loops:  # the whole run is the step
            events = [*events, Event(-1, "step", "run", None, -1, start, end)]
        made = build.steps(
            events, built.launches, program.backend, first, self._origin_ns, built.copied
        )
        self._collect({s.number: s for s in made}, range(first, first + trips))
        result.events = []
        return result

    def _collect(self, made: Mapping[int, Step], numbers: range) -> None:
        """Files the recorded steps by the schedule: a cycle is saved at its
        RECORD_AND_SAVE step or where recording stops."""
        for n in numbers:
            action = self.schedule(n)
            if n in made and action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
                self._pending.append(made[n])
                self.all_steps.append(made[n])
            if action is ProfilerAction.RECORD_AND_SAVE or (
                action in (ProfilerAction.NONE, ProfilerAction.WARMUP) and self._pending
            ):
                self._save()

    def _variant(self, program: Program, source: ModuleOp) -> build.Variant:
        """The program's profiling variant, built once per program."""
        if id(program) not in self._builds:
            self._builds[id(program)] = build.variant(program, source)
        return self._builds[id(program)]

    # -- what it recorded --------------------------------------------------------------
    def _recorded(self) -> list[Step]:
        if not self.steps and not self._pending:
            raise GradfuseError(
                "the profile recorded no step: run execute() inside `with profile(...)`,"
                " with a schedule whose active steps the program reaches"
            )
        return self.steps or self._pending

    def key_averages(self, group_by: str | None = None) -> Any:
        """Times aggregated by kernel, or by layer with `group_by="layer"`; `.table()`."""
        from gradfuse.profiler.tables import key_averages

        return key_averages(self._recorded(), group_by, self.with_flops)

    def kernel_table(self, step: int | None = None) -> str:
        """PyProf's table of one recorded step (its number; default: the first)."""
        from gradfuse.profiler.tables import kernel_table

        return kernel_table(pick(self._recorded(), step))

    def overview(self) -> Any:
        """The step breakdown (Kernel, Memcpy, ..., Other) per step, its average and
        recommendations; print it."""
        from gradfuse.profiler.overview import overview

        return overview(self._recorded())

    def export_chrome_trace(self, path: str | Path) -> None:
        """Writes the recorded steps as Chrome trace-event JSON (Perfetto, chrome://tracing)."""
        from gradfuse.profiler.trace import export_chrome_trace

        export_chrome_trace(self._recorded(), path)

    def export_timeline(self, path: str | Path, step: int | None = None) -> None:
        """Writes one recorded step (its number; default the first) as a self-contained
        HTML page: the timeline coloured by direction, with time per layer beside it."""
        from gradfuse.profiler.picture import export_timeline

        export_timeline(self._recorded(), path, step)

    def summary(self, row_limit: int = 20) -> str:
        """What `ir-run --profile` and the examples' `--profile` print: the kernel table
        of the first recorded step, the time per layer, and the overview."""
        layers = self.key_averages(group_by="layer").table(row_limit=row_limit)
        return "\n\n".join([self.kernel_table(), layers, str(self.overview())])


__all__ = ["active", "outer_loops", "profile"]
