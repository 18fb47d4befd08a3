"""Timing for the benchmarks: runs that take turns, the best of each kept:
`best_of(3, [ours, theirs])`, the seconds of each one's fastest run.

As `timeit`, a timed run has Python's cyclic garbage collector off: a full collection
walks every object alive in the process, the compiled program's IR too, and would
charge one side for the other's objects (in benchmarks/convnets.py, one collection
during ResNet-18's runs took 0.79 s, 13 ms a step over 60 steps)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gradfuse.gcpause import paused_gc


def best_of(rounds: int, runs: Sequence[Callable[[], object]]) -> list[float]:
    """The fastest of `rounds` timings of each run, the runs taking turns in each round
    (a shared machine's load then weighs on both alike), each timed with the garbage
    collector off, as `timeit` times."""
    best = [float("inf")] * len(runs)
    for _ in range(rounds):
        for i, run in enumerate(runs):
            with paused_gc():
                start = time.perf_counter()
                run()
                best[i] = min(best[i], time.perf_counter() - start)
    return best
