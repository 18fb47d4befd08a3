"""A profile's tables: PyProf's kernel table of one step, and torch's `key_averages`.

    print(prof.kernel_table())
    # Idx  Direction  Layer  Op           Kernel  Params         Time(us)  FLOPs  ...
    # 1    host       -      feeder       images  [8, 3, 64, 64]    41.2   0      ...
    # 2    fprop      main.0 contraction  k0      [8, 64 | 48]      12.9   393k   ...
    print(prof.key_averages(group_by="layer").table(sort_by="self_time_total", row_limit=10))

Times are µs. A launch that fuses several layers gives each its share of the time (by
FLOPs, or by ops where it has none), so the layer rows add up to the kernel time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gradfuse.diagnostics import GradfuseError
from gradfuse.profiler.launches import UNATTRIBUTED
from gradfuse.profiler.steps import Span, Step
from gradfuse.profiler.text import cut, render, si

SORT_KEYS = {
    "self_time_total": "self_time_total_us", "time_total": "time_total_us",
    "self_cpu_time_total": "self_time_total_us", "cpu_time_total": "time_total_us",
    "self_cuda_time_total": "self_time_total_us", "cuda_time_total": "time_total_us",
    "self_device_time_total": "self_time_total_us", "device_time_total": "time_total_us",
    "count": "count", "calls": "count", "flops": "flops",
}  # fmt: skip
"""`table(sort_by=...)`: gradfuse's keys and torch's names for them."""


def _rate(amount: float, us: float) -> str:
    """Amount per µs as G/s (FLOP/s or bytes/s)."""
    return f"{amount / us / 1000:.2f}" if us > 0 and amount else ""


def _op(span: Span) -> str:
    if span.launch is not None:
        return span.launch.op
    return "memcpy" if span.kind == "copy" else span.kind if span.kind != "op" else span.name


def kernel_table(step: Step, *, layer_width: int = 40) -> str:
    """PyProf's columns, one row per launch, callback and copy of `step`: Idx, Direction,
    Layer, Op, Kernel, Params, Grid and Block (cuda), Time(us), FLOPs, Read, Written,
    GFLOP/s, GB/s, Source."""
    cuda = step.backend in ("cuda", "cuda-emu")
    head = ["Idx", "Direction", "Layer", "Op", "Kernel", "Params", *(["Grid", "Block"] * cuda),
            "Time(us)", "FLOPs", "Read", "Written", "GFLOP/s", "GB/s", "Source"]  # fmt: skip
    rows = [head]
    for i, s in enumerate(step.spans, start=1):
        params = s.launch.params if s.launch is not None else ""
        kernel = "-" if s.kind == "op" else s.name
        moved = s.bytes_read + s.bytes_written
        rows.append([
            str(i), s.direction, cut(",".join(s.layers), layer_width) or "-", _op(s), kernel,
            cut(params, 40), *([s.grid, s.block] * cuda), f"{s.dur_us:.1f}", si(s.flops),
            si(s.bytes_read), si(s.bytes_written), _rate(s.flops, s.dur_us),
            _rate(moved, s.dur_us), s.source,
        ])  # fmt: skip
    numbers = {head.index(c) for c in ("Time(us)", "FLOPs", "Read", "Written", "GFLOP/s", "GB/s")}
    title = f"{step.name}: {step.dur_us:.1f} us, {len(step.kernels())} kernels ({step.backend})"
    return title + "\n" + render(rows, frozenset(numbers))


@dataclass
class KeyAverage:
    """One row of `key_averages()`: a kernel (or tg op, or callback) by name, or a layer."""

    key: str
    count: int = 0
    self_time_total_us: float = 0.0
    time_total_us: float = 0.0
    flops: float = 0.0
    directions: dict[str, float] = field(default_factory=dict)

    @property
    def self_time_avg_us(self) -> float:
        return self.self_time_total_us / self.count if self.count else 0.0


class KeyAverages(list[KeyAverage]):
    """`key_averages()`'s rows, with torch's `.table()`."""

    def __init__(self, rows: Sequence[KeyAverage], step_us: float, with_flops: bool, by: str):
        super().__init__(rows)
        self.step_us, self.with_flops, self.by = step_us, with_flops, by

    def table(self, sort_by: str = "self_time_total", row_limit: int = 100) -> str:
        """The rows as text, the largest `sort_by` first (gradfuse's or torch's key
        names: `self_time_total`, `self_cuda_time_total`, `count`, `flops`, ...)."""
        if sort_by not in SORT_KEYS:
            raise GradfuseError(
                f'table(sort_by="{sort_by}"): sort by one of {", ".join(sorted(SORT_KEYS))}'
            )
        attr = SORT_KEYS[sort_by]
        rows = sorted(self, key=lambda r: -getattr(r, attr))[: max(row_limit, 0)]
        head = ["Name" if self.by == "kernel" else "Layer", "Calls", "Self total(us)",
                "Self avg(us)", "% of step", "Total(us)"]  # fmt: skip
        head += ["FLOPs", "GFLOP/s"] if self.with_flops else []
        out = [head]
        for r in rows:
            cells = [cut(r.key, 48), str(r.count), f"{r.self_time_total_us:.1f}",
                     f"{r.self_time_avg_us:.1f}",
                     f"{100 * r.self_time_total_us / self.step_us:.1f}" if self.step_us else "",
                     f"{r.time_total_us:.1f}"]  # fmt: skip
            if self.with_flops:
                cells += [si(round(r.flops)), _rate(r.flops, r.self_time_total_us)]
            out.append(cells)
        return render(out, frozenset(range(1, len(head))))


def key_averages(steps: Sequence[Step], group_by: str | None, with_flops: bool) -> KeyAverages:
    """Aggregates `steps` by kernel name (or tg op, callback, copy), or by layer with
    `group_by="layer"` (each span's time split by its layer shares; host work under
    `host`). A `ProfilerStep*` row holds the steps: total their time, self the time no
    span covers."""
    if group_by not in (None, "layer"):
        raise GradfuseError(f'key_averages(group_by="{group_by}"): None or "layer"')
    rows: dict[str, KeyAverage] = {}
    total = sum(s.dur_us for s in steps)
    covered = 0.0
    for step in steps:
        covered += _union(step.spans)
        for s in step.spans:
            parts = (
                (s.layer_shares or {_key(s, group_by): 1.0}) if group_by else {_key(s, None): 1.0}
            )
            for key, share in parts.items():
                row = rows.setdefault(key, KeyAverage(key))
                row.count += 1
                row.self_time_total_us += share * s.dur_us
                row.time_total_us += share * s.dur_us
                row.flops += share * s.flops
    marker = KeyAverage("ProfilerStep*", len(steps), total - covered, total)
    return KeyAverages([marker, *rows.values()], total, with_flops, group_by or "kernel")


def _key(span: Span, group_by: str | None) -> str:
    if group_by:  # a span without layer shares: host work, or a launch of no origin
        return UNATTRIBUTED if span.kind in ("kernel", "op") else "host"
    return span.name if span.kind in ("kernel", "op") else f"{span.kind} {span.name}"


def _union(spans: Sequence[Span]) -> float:
    """µs covered by at least one of `spans`."""
    covered, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s.start_us):
        start = max(s.start_us, end)
        if s.end_us > start:
            covered += s.end_us - start
        end = max(end, s.end_us)
    return covered
