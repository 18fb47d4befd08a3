"""A short transformer's training step, gradfuse against PyTorch CPU eager (issue 6).

    .venv/bin/python benchmarks/transformer.py [--steps 1000] [--rounds 3] [--backend c]
        [--optimizer sgd] [--torch-compile]

TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True,
dropout=0) on an input of shape (2, 16, 64), loss = output sum, one optimizer step;
`--steps` steps in one `ir_for` on the chosen backend (default: gradfuse's default,
the C backend without a GPU, NumPy kernels when the C backend is not there), and the
same steps in PyTorch eager on the CPU in the same run (when torch is importable).
Each side runs its `--steps` steps `--rounds` times, the two taking turns, after an
untimed run (gradfuse: the library's load; PyTorch: 3 warm-up steps), and the best run
of each is kept, as `timeit` does: the machine is shared, and a slow run measures its
other load. Prints time per step, the ratio, and kernels per step beside PyTorch's
count of the ATen ops that run a kernel (views and other metadata-only ops left out). On the cuda
backend PyTorch runs on the GPU too, its kernels counted by torch.profiler, and
`torch.compile` (mode "reduce-overhead") is timed as well (`--torch-compile` on a CPU).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from threads import add_threads_option, use_threads  # benchmarks/threads.py
from timing import best_of  # benchmarks/timing.py
from torch_compile import add_torch_compile_option, mode, step_begin, torch_compile_wanted

import gradfuse
from gradfuse import Feeder, ir_for
from gradfuse.backend import choose_backend
from gradfuse.nn import SGD, Adam, TransformerEncoderLayer

D_MODEL, NHEAD, FF = 64, 4, 128
SHAPE = (2, 16, 64)
# ops that run no kernel besides those `OpOverload.is_view` names
METADATA_ONLY = ("aten._unsafe_view", "aten.alias", "profiler.")


def gradfuse_run(steps: int, backend: str | None, optimizer: str) -> dict[str, Any]:
    """Trace and compile `steps` training steps, and run them once (untimed); seconds of
    each phase, the kernel count and `run`, the compiled program's run."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    layer = TransformerEncoderLayer(D_MODEL, NHEAD, FF, dropout=0.0, batch_first=True)
    opt = Adam(layer.parameters(), lr=1e-4) if optimizer == "adam" else SGD(layer.parameters())
    x = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)

    def step() -> None:
        opt.zero_grad()
        layer(Feeder(lambda: x, shape=list(SHAPE), name="x")).sum().backward()
        opt.step()

    start = time.perf_counter()
    ir_for(range(steps), step)
    traced = time.perf_counter()
    program = gradfuse.compile(backend)
    compiled = time.perf_counter()
    program.run()
    return {
        "backend": program.backend,
        "trace": traced - start,
        "compile": compiled - traced,
        "first": time.perf_counter() - compiled,
        "kernels_per_step": program.kernels_per_iteration,
        "run": program.run,
    }


def torch_run(
    steps: int, optimizer: str, device: str = "cpu", compiled: bool = False
) -> dict[str, Any] | None:
    """The same steps in PyTorch on `device`, eager or through `torch.compile` (mode
    "reduce-overhead" on a GPU), warmed up: `run` runs them; and, eager, the kernels of
    one step: CUDA kernels from torch.profiler on a GPU, else the ATen ops that run a
    kernel."""
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None
    if device == "cuda" and not torch.cuda.is_available():
        return None
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D_MODEL, NHEAD, FF, dropout=0.0, batch_first=True)
    layer = layer.to(device)
    opt = (
        torch.optim.Adam(layer.parameters(), lr=1e-4)
        if optimizer == "adam"
        else torch.optim.SGD(layer.parameters(), lr=1e-3)
    )
    x = torch.tensor(np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)).to(device)
    model, update = layer, opt.step
    if compiled:
        model, update = (
            torch.compile(layer, mode=mode(device)),
            torch.compile(opt.step, mode=mode(device)),
        )

    def step() -> None:
        step_begin(compiled, device)
        opt.zero_grad()
        model(x).sum().backward()
        update()

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            name = str(func)
            if not (func.is_view or name.startswith(METADATA_ONLY)):
                self.ops.append(name)
            return func(*args, **(kwargs or {}))

    for _ in range(3):
        step()  # warm up (the optimizer creates its state, torch.compile compiles)
    sync()
    kernels = None
    if not compiled and device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            sync()
        kernels = sum(
            e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.startswith(("Memcpy", "Memset"))
            for e in prof.events()
        )
    elif not compiled:
        counter = Count()
        with counter:
            step()
        kernels = len(counter.ops)

    def run() -> None:
        for _ in range(steps):
            step()
        sync()

    return {
        "run": run,
        "ops_per_step": kernels,
        "threads": torch.get_num_threads(),
        "version": torch.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each, taking turns")
    parser.add_argument("--backend", default=None, help="gradfuse backend (default: its default)")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    add_torch_compile_option(parser)
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    backend = choose_backend(args.backend)
    if backend == "numpy" and args.backend is None:
        print("note: the C backend is not available here; measuring the numpy backend")
    g = gradfuse_run(args.steps, backend, args.optimizer)
    device = "cuda" if g["backend"] == "cuda" else "cpu"
    t = torch_run(args.steps, args.optimizer, device)
    runs = [g["run"]] if t is None else [g["run"], t["run"]]
    seconds = best_of(args.rounds, runs)
    g_step = seconds[0] / args.steps
    print(
        f"gradfuse ({g['backend']}): {g_step * 1e3:.3f} ms/step over {args.steps} steps, best of"
        f" {args.rounds} (trace {g['trace']:.2f} s, compile {g['compile']:.2f} s, first run"
        f" {g['first']:.2f} s), {g['kernels_per_step']} kernels/step"
    )
    if t is None:
        print("PyTorch: not importable, no ratio")
        return
    t_step = seconds[1] / args.steps
    counted = "CUDA kernels" if device == "cuda" else "ATen ops"
    print(
        f"PyTorch {t['version']} {device} eager ({t['threads']} threads): {t_step * 1e3:.3f}"
        f" ms/step, best of {args.rounds}, {t['ops_per_step']} {counted}/step"
    )
    print(
        f"speed ratio (PyTorch time / gradfuse time): {t_step / g_step:.2f}x;"
        f" kernels per step: {g['kernels_per_step']} vs {t['ops_per_step']}"
        f" ({g['kernels_per_step'] / t['ops_per_step']:.2f} of PyTorch's)"
    )
    if torch_compile_wanted(args.torch_compile, device):
        c = torch_run(args.steps, args.optimizer, device, compiled=True)
        assert c is not None
        (best,) = best_of(args.rounds, [c["run"]])
        c_step = best / args.steps
        print(f"PyTorch torch.compile, mode {mode(device)} ({device}): {c_step * 1e3:.3f} ms/step")
        print(f"speed ratio (torch.compile time / gradfuse time): {c_step / g_step:.2f}x")


if __name__ == "__main__":
    main()
