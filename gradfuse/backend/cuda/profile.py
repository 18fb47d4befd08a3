"""The cuda backend's profiling run: an event pair around each launch and copy.

`CudaProgram.run(profile=(first, last))` runs the program as always, except that every
run of launches is issued launch by launch (no CUDA graph, so that each launch can be
bracketed) and that, in the iterations first..last-1 of the outermost loop (-1: what
runs outside loops), an event pair (`Device.event`) is recorded on the stream around each kernel
launch, each feeder's host->device copy, each receiver's device->host copies and each
param copy of `save_params`, and each iteration is a `step`. Outside the window nothing
is recorded (but the graphs stay off for the whole run, so that the steps inside the
window run as those outside it).

    result = compile_cuda(lowered).run(feeders={"x": x}, profile=(1, 3))
    for e in result.events:
        print(e.iteration, e.kind, e.name, e.launch, e.grid, e.block, e.duration_ns)
    # 1 step loop 0 None    ...
    # 1 feeder feeder 0     ...
    # 1 kernel r0 1 (64, 1) (256, 1, 1) ...

The clocks: every `Event` is in ns of `time.monotonic_ns()`, as on the c backend. At the
run's start (params uploaded) the stream is synchronized and an anchor event is
recorded and waited for, between two host clock reads `before` and `after`; the anchor's
GPU time lies in [before, after], and it is taken to be `after` (the tightest of three
tries). A device event `e` is at `after + anchor.time_till(e)` (ms -> ns), so device
times are late by at most `after - before` (the measured skew, some µs), never early: a
launch never seems to start before the host issued it. Durations come from the pair
itself (`start.time_till(end)`, 0.5 µs resolution), not from two offsets of the anchor,
whose float32 ms lose precision as a run goes on (a 4 µs step 60 s in), so only the
positions carry that error; the GPU's and the host's clocks also drift apart by some
ppm over a run.

What each event spans:

- `kernel`, `copy`: the device pair around the launch or the `memcpy_dtod_async`.
- `feeder`: starts when the host calls the Python feeder (the DataLoader's time is
  what matters there) and lasts the callback (with the wait for its pinned staging
  buffer, normally none, and the copy into it; host clock) plus its host->device copy
  (device pair): the feeder's cost, as on c, where the two are one synchronous call.
  Its end is that sum, not a clock reading: the copy itself runs once the stream
  reaches it, maybe later.
- `receiver`: starts at its device->host copies (device pair) and lasts them plus the
  Python callback (host clock), which runs once the copies have landed, maybe during
  a later iteration.
- `step`: from the host starting the iteration to the last of its work ending: an
  event recorded on the stream after its last action, the host's end of it, and the
  ends of its events (a receiver's callback may end later). A step begins no later
  than its events (taken as their extremes, to absorb the skew), and steps of a
  pipelined loop may overlap: the host runs ahead of the GPU.

A kernel's and a callback's `launch` is its place among `profile_sites(main)`, the
kernel and callback sites of the host function in program order, the numbering of the
c backend's profiling build and of `gradfuse.profiler.launches()`. `site` is `launch`
for those; a copy's is `len(sites)` + the param's place among the module's globals,
a step's follows them (+ the number of the outermost loop).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xdsl.dialects import func, gpu, scf
from xdsl.ir import Operation

from gradfuse.backend.runner import Event, callback_key, host_call

if TYPE_CHECKING:
    from gradfuse.backend.cuda.runtime import _Run

    _Base = _Run
else:
    _Base = object  # runtime.py puts `_Run` behind this mixin (no import cycle)


@dataclass(frozen=True)
class LaunchSite:
    """A kernel launch or a host callback of the host function: `launch` is its place
    among them in program order, `name` the kernel's symbol or the callback's key."""

    op: Operation
    kind: str  # kernel, feeder or receiver
    name: str
    launch: int


def profile_sites(main: func.FuncOp) -> list[LaunchSite]:
    """The `gpu.launch_func`s and feeder/receiver `func.call`s of `main`, in program
    order (loop bodies where the loop stands): no GPU needed.

        [(s.kind, s.name) for s in profile_sites(main)]
        # [('feeder', 'images'), ('kernel', 'r0'), ('kernel', 'g6'), ('receiver', 'log')]
    """
    out: list[LaunchSite] = []
    for op in main.walk():
        if isinstance(op, gpu.LaunchFuncOp):
            name = op.kernel.nested_references.data[-1].data
            out.append(LaunchSite(op, "kernel", name, len(out)))
        elif isinstance(op, func.CallOp) and not is_allreduce(op):
            callee = op.callee.root_reference.data
            name = callback_key(op) or callee
            kind = "feeder" if host_call(callee) == "feeder" else "receiver"
            out.append(LaunchSite(op, kind, name, len(out)))
    return out


def is_allreduce(op: Operation) -> bool:
    """`tg.allreduce`'s call (`@gradfuse_allreduce_N`): timed, but not a launch site."""
    return isinstance(op, func.CallOp) and host_call(op.callee.root_reference.data) == "allreduce"


def allreduce_sites(main: func.FuncOp, first: int) -> dict[Operation, tuple[int, str]]:
    """Each all-reduce call of `main`: its site number (from `first`, after the launch,
    copy and step sites) and its name, `all_reduce mean` as on c."""
    calls = [op for op in main.walk() if is_allreduce(op)]
    return {op: (first + k, f"all_reduce {callback_key(op)}") for k, op in enumerate(calls)}


@dataclass
class _Timed:
    """One event being measured: host ns and/or a device pair, resolved after the run."""

    site: int
    kind: str
    name: str
    launch: int | None
    iteration: int
    host: list[int] = field(default_factory=lambda: [0, 0])
    pair: tuple[Any, Any] | None = None
    host_after_ns: int = 0  # a receiver's callback, after its copies
    grid: str = ""
    block: str = ""
    members: list[_Timed] = field(default_factory=list)  # a step's events
    end_event: Any = None  # a step's: recorded after its last action


class ProfiledRun(_Base):
    """`_Run` with the timing of the module docstring (mixed in by runtime.py)."""

    def __init__(self, *state: Any, window: tuple[int, int]):
        """`_Run(*state)`, then the anchor of the clocks (the params on the device)."""
        super().__init__(*state)
        self.window = window
        found = profile_sites(self.prog.main)
        self.sites = {s.op: s for s in found}
        globals_ = list(self.prog.globals)
        self.copy_site = {key: len(found) + globals_.index(name) for name, key in self.keys.items()}
        self.global_of = {key: name for name, key in self.keys.items()}
        self.step_site = len(found) + len(globals_)
        self.reductions = allreduce_sites(self.prog.main, self.step_site + 1)
        self.loop_number: dict[scf.ForOp, int] = {}
        self.iteration = -1
        self.on = window[0] <= -1 < window[1]
        self.timed: list[_Timed] = []
        self.step: _Timed | None = None
        self.callback: LaunchSite | None = None
        self.feeding: _Timed | None = None
        self.receiving: list[_Timed | None] = []  # one per `pending`, in its order
        self.stream.synchronize()
        tries = []
        for _ in range(3):
            anchor = self.prog.device.event()
            before = time.monotonic_ns()
            anchor.record(self.stream)
            anchor.synchronize()
            after = time.monotonic_ns()
            tries.append((after - before, after, anchor))
        self.skew_ns, self.origin_ns, self.anchor = min(tries, key=lambda t: t[0])

    def pair(self) -> Any:
        event = self.prog.device.event()
        event.record(self.stream)
        return event

    def add(self, timed: _Timed) -> _Timed:
        self.timed.append(timed)
        if self.step is not None:
            self.step.members.append(timed)
        return timed

    # --- the hooks of `_Run` ----------------------------------------------------------

    def segment(self, launches: list[Any], captured: bool) -> Any:
        return super().segment(launches, captured=False)  # one by one, each timed

    def on_stream(
        self, action: Any, site: int, kind: str, name: str, launch: int | None = None,
        grid: str = "", block: str = "",
    ) -> Any:  # fmt: skip
        """`action` (work queued on the stream: a launch, an all-reduce), timed inside
        the window by a device event pair around it."""

        def timed() -> None:
            if not self.on:
                action()
                return
            start = self.pair()
            action()
            t = _Timed(site, kind, name, launch, self.iteration, grid=grid, block=block)
            t.pair = (start, self.pair())
            self.add(t)

        return timed

    def launch(self, op: gpu.LaunchFuncOp) -> Any:
        site, env = self.sites[op], self.env
        grid = str((env[op.gridSizeX], env[op.gridSizeY]))
        block = str((env[op.blockSizeX], env[op.blockSizeY], env[op.blockSizeZ]))
        return self.on_stream(
            super().launch(op), site.launch, "kernel", site.name, launch=site.launch,
            grid=grid, block=block,
        )  # fmt: skip

    def call(self, op: func.CallOp) -> Any:
        action = super().call(op)
        if op in self.reductions:  # on the stream: a device pair, as a kernel
            index, name = self.reductions[op]
            return self.on_stream(action, index, "allreduce", name)
        site = self.sites[op]

        def timed() -> None:
            self.callback = site
            action()

        return timed

    def feed(self, key: str, ty: Any, buf: Any, where: Any) -> None:
        site = self.callback
        if not self.on or site is None:
            return super().feed(key, ty, buf, where)
        t = _Timed(site.launch, "feeder", site.name, site.launch, self.iteration)
        t.host[0] = time.monotonic_ns()
        self.feeding = t
        try:
            super().feed(key, ty, buf, where)  # `copy_to_device` closes the host part
        finally:
            self.feeding = None
        self.add(t)

    def copy_to_device(self, ptr: int, host: Any) -> None:
        t = self.feeding
        if t is None:
            return super().copy_to_device(ptr, host)
        t.host[1] = time.monotonic_ns()
        start = self.pair()
        super().copy_to_device(ptr, host)
        t.pair = (start, self.pair())

    def receive(self, key: str, buffers: list[Any], where: Any) -> None:
        site = self.callback
        if not self.on or site is None:
            super().receive(key, buffers, where)
            self.receiving.append(None)
            return
        start = self.pair()
        super().receive(key, buffers, where)
        t = _Timed(site.launch, "receiver", site.name, site.launch, self.iteration)
        t.pair = (start, self.pending[-1][0])  # the event after its copies
        self.receiving.append(self.add(t))

    def deliver(self, key: str, hosts: list[Any], where: Any) -> None:
        t = self.receiving.pop(0)
        before = time.monotonic_ns()
        super().deliver(key, hosts, where)
        if t is not None:
            t.host_after_ns = time.monotonic_ns() - before

    def copy_param(self, key: str, dst: Any, buf: Any) -> None:
        if not self.on:
            return super().copy_param(key, dst, buf)
        start = self.pair()
        super().copy_param(key, dst, buf)
        t = _Timed(self.copy_site[key], "copy", self.global_of[key], None, self.iteration)
        t.pair = (start, self.pair())
        self.add(t)

    def loop(self, op: scf.ForOp, outer: bool) -> Any:
        action = super().loop(op, outer)

        def timed() -> None:  # at its end, what follows the loop is at iteration -1
            action()
            self.at_iteration(op, -1)

        return timed if outer else action

    def at_iteration(self, loop: scf.ForOp, iteration: int) -> None:
        now = time.monotonic_ns()
        number = self.loop_number.setdefault(loop, len(self.loop_number))
        if self.step is not None:
            self.step.host[1], self.step.end_event = now, self.pair()
            self.step = None
        self.iteration = iteration
        self.on = self.window[0] <= iteration < self.window[1]
        if iteration >= 0 and self.on:
            site = self.step_site + number
            self.step = self.add(_Timed(site, "step", f"loop {number}", None, iteration))
            self.step.host[0] = time.monotonic_ns()

    # --- after the run ----------------------------------------------------------------

    def device_ns(self, event: Any) -> int:
        return self.origin_ns + round(self.anchor.time_till(event) * 1e6)

    def bounds(self, t: _Timed) -> tuple[int, int]:
        if t.kind == "step":
            inside = [self.bounds(m) for m in t.members]
            start = min([t.host[0], *(s for s, _ in inside)])
            ends = [t.host[1], self.device_ns(t.end_event), *(e for _, e in inside)]
            return start, max(ends)
        assert t.pair is not None
        device = round(t.pair[0].time_till(t.pair[1]) * 1e6)
        if t.kind == "feeder":
            return t.host[0], t.host[1] + device
        start = self.device_ns(t.pair[0])
        return start, start + device + t.host_after_ns

    def events(self) -> list[Event]:
        """The run's `Event`s, in the order they started (the stream synchronized)."""
        self.stream.synchronize()
        out = []
        for t in self.timed:
            where = (t.site, t.kind, t.name, t.launch, t.iteration, *self.bounds(t))
            out.append(Event(*where, grid=t.grid, block=t.block))
        return sorted(out, key=lambda e: (e.start_ns, e.kind != "step"))
