"""A profile's data: the recorded steps, each a list of timed spans.

A `Step` is one iteration of the outermost `ir_for` (torch's `ProfilerStep#N`), or a
whole run of a program without a loop. Its `spans` are what ran in it, in the order they
started: kernels, host callbacks (feeders, receivers), param copies, and on the reference
backend one span per tg op. Times are µs since the profile started (the clock of
`time.monotonic_ns()`). Every span carries what gradfuse knows statically of it (its
`Launch`: layers, direction, FLOPs, bytes), so tables, traces and pictures read only this.

    for step in prof.steps:
        print(step.name, step.dur_us)              # ProfilerStep#2 812.4
        for s in step.spans:
            print(s.kind, s.name, s.layers, s.direction, s.dur_us)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gradfuse.diagnostics import GradfuseError
from gradfuse.profiler.launches import Launch

KINDS = ("kernel", "feeder", "receiver", "copy", "op", "allreduce")
"""Span kinds: a launch, a host callback, a param copy, a tg op (reference backend), an
all-reduce over the ranks (`tg.allreduce` on c)."""

CATEGORY = {"kernel": "kernel", "copy": "gpu_memcpy", "feeder": "cpu_op", "receiver": "cpu_op",
            "op": "cpu_op", "allreduce": "cpu_op"}  # fmt: skip
"""Span kind -> the trace-event category torch.profiler writes for its kind."""


@dataclass(frozen=True)
class Span:
    """One timed execution: a kernel launch, a callback, a param copy or a tg op.

    `launch` is the static record of a kernel or callback (None for copies and tg ops);
    `layers` lists the layers of its ops, `layer_shares` maps each layer (module path) to its share of the span, by FLOPs or,
    without FLOPs, by ops; `shares` does the same for directions (forward, backward,
    optimizer). `grid` and `block` are the launch configuration on cuda, else "".
    """

    name: str
    kind: str
    step: int
    start_us: float
    dur_us: float
    launch: Launch | None = None
    layer_shares: dict[str, float] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    direction: str = "host"
    """PyProf's Direction: `fprop`, `bprop`, `optimizer`, a mix (`fprop 60% bprop 40%`)
    or `host` for callbacks and copies."""
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    source: str = ""
    grid: str = ""
    block: str = ""
    layers: tuple[str, ...] = ()
    """The module path of every op in it, `(no module)` for ops outside modules: PyProf's
    Layer (a layer can have no share of the time when its ops have no FLOPs)."""

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us

    @property
    def category(self) -> str:
        """Its trace-event category (`kernel`, `gpu_memcpy`, `cpu_op`)."""
        return CATEGORY[self.kind]

    @property
    def trace_name(self) -> str:
        """The name it has in a trace: a feeder is named as torch names a DataLoader's
        `__next__` (`enumerate(DataLoader)#Feeder[images].__next__`), so that TensorBoard
        counts it as data loading; the rest keep their names."""
        if self.kind == "feeder":
            return f"enumerate(DataLoader)#Feeder[{self.name}].__next__"
        if self.kind == "copy":
            return f"Memcpy DtoD (param {self.name})"
        if self.kind == "allreduce":  # as torch names a collective (`gloo:all_reduce`)
            return f"mpi:{self.name}"
        return self.name


@dataclass(frozen=True)
class Step:
    """One recorded step: `number` is torch's N of `ProfilerStep#N`, counted from the
    first step the profile saw; `backend` the backend that ran it."""

    number: int
    start_us: float
    dur_us: float
    spans: tuple[Span, ...]
    backend: str

    @property
    def name(self) -> str:
        return f"ProfilerStep#{self.number}"

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us

    def kernels(self) -> list[Span]:
        """Its launches (tg ops other than callbacks on the reference backend)."""
        return [s for s in self.spans if s.kind in ("kernel", "op")]


def pick(steps: Sequence[Step], step: int | None) -> Step:
    """Step number `step` of `steps` (None: the first); an error names the recorded ones."""
    if not steps:
        raise GradfuseError("the profile recorded no step")
    if step is None:
        return steps[0]
    for s in steps:
        if s.number == step:
            return s
    have = ", ".join(str(s.number) for s in steps)
    raise GradfuseError(f"step {step} was not recorded (recorded: {have})")
