"""The step overview of TensorBoard's profiler plugin: each step's wall time split into
Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec and Other, an
average row, and recommendations in words.

Each instant of a step goes to the first category in that order that covers it, as the
plugin decides, so the parts sum to the step's time. Kernels (and tg ops on the
reference backend) are Kernel, param copies Memcpy, feeder callbacks DataLoader,
receiver callbacks CPU Exec, all-reduces over the ranks (data-parallel training on c)
Communication; the rest of the step (the host program between them) is Other. gradfuse has no Memset and no separate runtime calls: those stay 0.

    print(prof.overview())
    # Step            Total(us)  Kernel  Memcpy  Memset  Communication  Runtime  DataLoader  CPU Exec  Other
    # ProfilerStep#2    20912.0   612.1     3.0     0.0            0.0      0.0     20180.4      11.0  105.5
    # ...
    # Recommendations:
    # - feeder "images" takes 96.5 % of the step: make it cheaper or prefetch it
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gradfuse.profiler.steps import Step
from gradfuse.profiler.text import render

CATEGORIES = (
    "Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other",
)  # fmt: skip
CATEGORY_OF = {"kernel": "Kernel", "op": "Kernel", "copy": "Memcpy", "feeder": "DataLoader",
               "receiver": "CPU Exec", "allreduce": "Communication"}  # fmt: skip


@dataclass(frozen=True)
class StepBreakdown:
    """One step's µs per category (`parts`, in `CATEGORIES` order) and its wall time."""

    name: str
    total_us: float
    parts: dict[str, float]


def breakdown(step: Step) -> StepBreakdown:
    """Splits `step` into categories: each instant to the first category covering it
    (a sweep over the spans' starts and ends, clipped to the step)."""
    rank = {c: i for i, c in enumerate(CATEGORIES)}
    edges: list[tuple[float, int, int]] = []  # (time, +1 start / -1 end, category rank)
    for s in step.spans:
        start, end = max(s.start_us, step.start_us), min(s.end_us, step.end_us)
        if end > start:
            edges += [(start, 1, rank[CATEGORY_OF[s.kind]]), (end, -1, rank[CATEGORY_OF[s.kind]])]
    edges.sort()
    parts = dict.fromkeys(CATEGORIES, 0.0)
    open_ = [0] * len(CATEGORIES)
    at = step.start_us
    for time, delta, category in [*edges, (step.end_us, 0, 0)]:
        if time > at:
            first = next((c for c in range(len(CATEGORIES)) if open_[c]), rank["Other"])
            parts[CATEGORIES[first]] += time - at
            at = time
        open_[category] += delta
    return StepBreakdown(step.name, step.dur_us, parts)


@dataclass(frozen=True)
class Overview:
    """Every recorded step's breakdown, their average, and recommendations."""

    steps: tuple[StepBreakdown, ...]
    average: StepBreakdown
    recommendations: tuple[str, ...]

    def __str__(self) -> str:
        head = ["Step", "Total(us)", *CATEGORIES]
        rows = [head]
        shown = self.steps if len(self.steps) <= 12 else (*self.steps[:10], self.steps[-1])
        for b in (*shown, self.average):
            rows.append([b.name, f"{b.total_us:.1f}", *(f"{b.parts[c]:.1f}" for c in CATEGORIES)])
        if len(shown) < len(self.steps):  # the first ten, the last, the average
            rows.insert(11, [f"... {len(self.steps) - 11} more", *[""] * (len(head) - 1)])
        text = render(rows, frozenset(range(1, len(head))))
        share = [f"{c} {100 * self.average.parts[c] / self.average.total_us:.1f} %"
                 for c in CATEGORIES if self.average.total_us]  # fmt: skip
        lines = [text, "Average step: " + ", ".join(share), "Recommendations:"]
        return "\n".join(lines + [f"- {r}" for r in self.recommendations])


def overview(steps: Sequence[Step]) -> Overview:
    """The overview of `steps` (at least one)."""
    parts = [breakdown(s) for s in steps]
    n = len(parts)
    mean = {c: sum(b.parts[c] for b in parts) / n for c in CATEGORIES}
    average = StepBreakdown("Average", sum(b.total_us for b in parts) / n, mean)
    return Overview(tuple(parts), average, tuple(recommend(steps, average)))


def recommend(steps: Sequence[Step], average: StepBreakdown) -> list[str]:
    """Advice in words from the average step: a feeder or receiver callback that takes
    a large part of it, kernels that leave the host waiting, the slowest layer."""
    total = average.total_us or 1.0
    out: list[str] = []
    per: dict[tuple[str, str], float] = {}
    for step in steps:
        for s in step.spans:
            if s.kind in ("feeder", "receiver"):
                per[(s.kind, s.name)] = per.get((s.kind, s.name), 0.0) + s.dur_us / len(steps)
    for (kind, name), us in sorted(per.items(), key=lambda kv: -kv[1]):
        share = 100 * us / total
        if share < 10:
            continue
        if kind == "feeder":
            out.append(f'feeder "{name}" takes {share:.0f} % of the step: make it cheaper or'
                       " prefetch it (give the feeder an array of all batches, or compute the"
                       " batch inside the program)")  # fmt: skip
        else:
            out.append(f'receiver "{name}" takes {share:.0f} % of the step: call it less often'
                       " (record it outside the loop, or every k-th step in a nested loop)")  # fmt: skip
    talk = 100 * average.parts["Communication"] / total
    if talk >= 20:
        out.append(f"all-reduces over the ranks take {talk:.0f} % of the step: a larger batch"
                   " per rank (or fewer ranks) spends more of it computing")  # fmt: skip
    other = 100 * average.parts["Other"] / total
    if other >= 30:
        out.append(f"{other:.0f} % of the step is host time outside kernels and callbacks:"
                   " fewer, larger launches (a larger batch) would amortize it")  # fmt: skip
    kernel = 100 * average.parts["Kernel"] / total
    if not out:
        out.append(f"kernels take {kernel:.0f} % of the step: the step is compute bound; see"
                   ' key_averages(group_by="layer") for the layers to work on')  # fmt: skip
    return out
