"""The c backend's profiling build against its default build on the DCGAN step (issue 14,
Correctness 6: params bitwise equal, overhead at most 5 % of the step), in one run.

    .venv/bin/python benchmarks/profiler_overhead.py [--steps 10] [--repeat 7] [--batch 8]
        [--threads N]

examples/dcgan.py's training step at `--batch`, `--steps` steps in `ir_for` (one loss
receiver per step, a no-op here), lowered once and compiled twice with the c backend:
`compile_c(module)` and `compile_c(module, profile=True)`. Three ways to run it:

1. default: the default build;
2. profiling, empty window: the profiling build run with `profile=None` (each site tests
   a flag, no clock read);
3. profiling, every step: the profiling build run with `profile=(0, steps)` (two clock
   reads and an event per site, the events read back into Python).

Each run starts from the same params and the same data (a fresh `Data()`), and the runs
are interleaved (1 2 3 1 2 3 ...) `--repeat` times so that a busy machine slows all
three alike. Prints the median time per step of each, the ratios (2)/(1) and (3)/(1)
as overheads in percent, and whether the params after (1) and after (3) are bitwise
equal. Times are of the whole `run()` call, divided by the steps: wall time, and CPU
time (`time.process_time`, all threads), the steadier figure on a shared machine with
`--threads 1` (with more threads it counts OpenMP's spin-waits too).

Measured on the 2-core developer machine, shared (load average 3.5-4 during the run),
`.venv/bin/python benchmarks/profiler_overhead.py --steps 5 --repeat 9 --threads 1`:

    wall time, median of 9 (min, max), ms a step:
      (1) default                    384.86 (353.3, 578.0)
      (2) profiling, empty window    382.33 (350.9, 540.7)  overhead -0.66 % (of the mins -0.68 %)
      (3) profiling, every step      382.01 (348.9, 588.5)  overhead -0.74 % (of the mins -1.25 %)
    CPU time, median of 9 (min, max), ms a step:
      (1) default                    358.08 (350.1, 377.3)
      (2) profiling, empty window    361.36 (343.7, 372.4)  overhead +0.92 % (of the mins -1.84 %)
      (3) profiling, every step      356.39 (342.4, 373.1)  overhead -0.47 % (of the mins -2.21 %)
    events recorded per run: 0, 0, 615
    params after (2) bitwise equal to (1)'s: yes
    params after (3) bitwise equal to (1)'s: yes

The overhead is below this machine's noise (about +-3 % between medians, 123 events a
step of about 360 ms). With both cores (no `--threads`) at load 3-6, the wall medians
moved by -16 % to +15 % between the three ways run by run (one step took 220 ms to
1.6 s): too noisy to measure a few percent; use `--threads 1` on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import ModuleType
from typing import Any

import numpy as np
from convnets import example  # benchmarks/convnets.py
from threads import add_threads_option, use_threads  # benchmarks/threads.py

import gradfuse
from gradfuse.backend.c import CProgram, compile_c
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline

MODES = ("default", "profiling, empty window", "profiling, every step")


def build(batch: int, steps: int) -> tuple[ModuleType, dict[str, np.ndarray], CProgram, CProgram]:
    """Records `steps` DCGAN steps at `batch` (a receiver every step) and compiles them:
    the example module, the initial params and the default and profiling builds."""
    dcgan = example("dcgan", BATCH=batch)
    gradfuse.reset()
    dcgan.record(steps=steps, log_every=1)
    prog = program()
    params = {k: p.data.copy() for k, p in prog.params.items()}
    module = prog.module.clone()
    run_pipeline(module, "cpu")
    return dcgan, params, compile_c(module), compile_c(module, profile=True)


def run_once(
    built: CProgram, dcgan: ModuleType, params: dict[str, np.ndarray], window: Any
) -> tuple[float, float, dict[str, np.ndarray], int]:
    """One timed run from the initial params and fresh data: its wall and CPU seconds,
    its final params and the number of events it recorded."""
    data = dcgan.Data()
    feeders = {"images": data.images, "noise": data.noise}
    receivers = {"losses": lambda *values: None}
    fresh = {k: v.copy() for k, v in params.items()}
    kwargs = {"profile": window} if built.profile else {}
    start, cpu = time.perf_counter(), time.process_time()
    result = built.run(feeders=feeders, receivers=receivers, params=fresh, **kwargs)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, result.params, len(result.events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    start = time.perf_counter()
    dcgan, params, plain, profiled = build(args.batch, args.steps)
    print(f"DCGAN step, batch {args.batch}, {args.steps} steps a run, {args.repeat} runs each;"
          f" record + 2 c builds {time.perf_counter() - start:.1f} s")  # fmt: skip
    runs = ((plain, None), (profiled, None), (profiled, (0, args.steps)))
    times: list[list[float]] = [[] for _ in MODES]
    cpus: list[list[float]] = [[] for _ in MODES]
    finals: list[dict[str, np.ndarray]] = [{} for _ in MODES]
    events = [0] * len(MODES)
    run_once(plain, dcgan, params, None)  # warm-up: page in both libraries
    run_once(profiled, dcgan, params, (0, args.steps))
    for _ in range(args.repeat):
        for i, (built, window) in enumerate(runs):
            seconds, cpu, finals[i], events[i] = run_once(built, dcgan, params, window)
            times[i].append(seconds / args.steps)
            cpus[i].append(cpu / args.steps)
    for what, samples in (("wall", times), ("CPU", cpus)):
        print(f"{what} time, median of {args.repeat} (min, max), ms a step:")
        base = statistics.median(samples[0])
        for i, mode in enumerate(MODES):
            med = statistics.median(samples[i])
            spread = f"{min(samples[i]) * 1e3:.1f}, {max(samples[i]) * 1e3:.1f}"
            low = min(samples[i]) / min(samples[0]) - 1
            ratio = f"  overhead {100 * (med / base - 1):+.2f} % (of the mins {100 * low:+.2f} %)"
            ratio = "" if i == 0 else ratio
            print(f"  ({i + 1}) {mode:24s} {med * 1e3:8.2f} ({spread}){ratio}")
    print(f"events recorded per run: {events[0]}, {events[1]}, {events[2]}")
    for i in (1, 2):
        same = finals[0].keys() == finals[i].keys() and all(
            np.array_equal(finals[0][k], finals[i][k]) for k in finals[0]
        )
        print(f"params after ({i + 1}) bitwise equal to (1)'s: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
