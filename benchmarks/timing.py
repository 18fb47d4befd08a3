"""Timing for the benchmarks: runs that take turns, the best of each kept:
`best_of(3, [ours, theirs])`, the seconds of each one's fastest run."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def best_of(rounds: int, runs: Sequence[Callable[[], object]]) -> list[float]:
    """The fastest of `rounds` timings of each run, the runs taking turns in each round
    (a shared machine's load then weighs on both alike)."""
    best = [float("inf")] * len(runs)
    for _ in range(rounds):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - start)
    return best
