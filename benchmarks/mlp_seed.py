"""The seed program (examples/mlp.py), gradfuse against PyTorch eager, in one run (issue 5).

    .venv/bin/python benchmarks/mlp_seed.py [--steps 1000] [--backend c] [--repeat 3]
        [--torch-compile]

A 255-255-255 MLP with a sigmoid, SGD lr=0.01, a constant (2, 255) batch from a
feeder, `--steps` steps in one `ir_for`. Prints, for gradfuse: trace and compile time
with a cold and a warm compile cache (trace to runnable), run time per step; for
PyTorch eager (when importable; CPU here, the GPU too when both see one): time per
step, the same steps as a Python loop; and their ratio; with `--torch-compile` (the
default on a GPU) the same for `torch.compile` (mode "reduce-overhead" on a GPU).
Each time is the best of `--repeat` runs, gradfuse's and PyTorch eager's taking turns
(after an untimed run of each), so that the shared machine's load weighs on both alike.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from empty_cache import empty_cache  # benchmarks/empty_cache.py
from threads import add_threads_option, use_threads  # benchmarks/threads.py
from timing import best_of  # benchmarks/timing.py
from torch_compile import add_torch_compile_option, mode, step_begin, torch_compile_wanted

import gradfuse
from gradfuse import Feeder, ir_for
from gradfuse.nn import SGD, Linear, Sequential, Sigmoid

WIDTH, BATCH = 255, 2


def record(steps: int) -> Sequential:
    """Records the seed program's loop; returns its model."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    nn = Sequential(Linear(WIDTH, WIDTH), Sigmoid(), Linear(WIDTH, WIDTH))
    opt = SGD(nn.parameters(), lr=0.01)
    batch = np.full((BATCH, WIDTH), 0.2, dtype=np.float32)

    def step() -> None:
        opt.zero_grad()
        nn(Feeder(lambda: batch, shape=[BATCH, WIDTH])).backward()
        opt.step()

    ir_for(range(steps), step)
    return nn


def gradfuse_compile(steps: int, backend: str | None) -> tuple[Any, float]:
    """Trace and compile: the program and the seconds from trace start to runnable."""
    start = time.perf_counter()
    record(steps)
    program = gradfuse.compile(backend)
    return program, time.perf_counter() - start


def gradfuse_run(steps: int, backend: str | None) -> dict[str, Any]:
    """Cold and warm compile times, the program run once (untimed), and its `run`."""
    with empty_cache():
        _, cold_s = gradfuse_compile(steps, backend)
        program, warm_s = gradfuse_compile(steps, backend)
    program.run()
    return {
        "backend": program.backend,
        "cold": cold_s,
        "warm": warm_s,
        "run": program.run,
        "kernels": program.kernels_per_iteration,
    }


def torch_run(steps: int, device: str, compiled: bool = False) -> Callable[[], None] | None:
    """The same loop in PyTorch eager on `device`, run once (warm-up): a run of it; with
    `compiled`, the model and the optimizer step through `torch.compile` (mode
    "reduce-overhead", CUDA graphs, on a GPU), whose warm-up run compiles."""
    try:
        import torch
    except ImportError:
        return None
    if device == "cuda" and not torch.cuda.is_available():
        return None
    torch.manual_seed(0)
    nn = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.Sigmoid(), torch.nn.Linear(WIDTH, WIDTH)
    ).to(device)
    opt = torch.optim.SGD(nn.parameters(), lr=0.01)
    model, update = nn, opt.step
    if compiled:
        model, update = (
            torch.compile(nn, mode=mode(device)),
            torch.compile(opt.step, mode=mode(device)),
        )
    batch = np.full((BATCH, WIDTH), 0.2, dtype=np.float32)

    def run() -> None:
        for _ in range(steps):
            step_begin(compiled, device)
            opt.zero_grad()
            x = torch.from_numpy(batch).to(device)  # a fresh host batch each step, as the feeder
            model(x).backward(torch.ones(BATCH, WIDTH, device=device))
            update()
        if device == "cuda":
            torch.cuda.synchronize()

    run()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--backend", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    add_torch_compile_option(parser)
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    ours = gradfuse_run(args.steps, args.backend)
    device = "cuda" if ours["backend"] == "cuda" else "cpu"
    theirs = torch_run(args.steps, device)
    seconds = best_of(args.repeat, [ours["run"]] + ([theirs] if theirs else []))
    step = seconds[0] / args.steps
    print(f"seed MLP, {args.steps} steps, batch {BATCH}, width {WIDTH}")
    print(f"gradfuse [{ours['backend']}]: {ours['kernels']} kernels per step")
    print(
        f"  compile (trace to runnable): cold cache {ours['cold']:.3f} s, warm cache {ours['warm']:.3f} s"
    )
    print(f"  run: {step * 1e6:.1f} us per step (best of {args.repeat})")
    if theirs is None:
        print(f"PyTorch eager ({device}): not importable here, no ratio")
        return
    eager = seconds[1] / args.steps
    print(f"PyTorch eager ({device}): {eager * 1e6:.1f} us per step (best of {args.repeat})")
    print(f"speed ratio, gradfuse / PyTorch eager: {eager / step:.2f}x")
    if torch_compile_wanted(args.torch_compile, device):
        compiled = torch_run(args.steps, device, compiled=True)
        assert compiled is not None
        best = best_of(args.repeat, [compiled])[0] / args.steps
        print(
            f"PyTorch torch.compile, mode {mode(device)} ({device}): {best * 1e6:.1f} us per step"
        )
        print(f"speed ratio, gradfuse / torch.compile: {best / step:.2f}x")


if __name__ == "__main__":
    main()
