"""Convolutional training steps (issue 7): kernels per step against PyTorch's profile,
and step time on the C backend against PyTorch CPU eager, measured in one run.

    .venv/bin/python benchmarks/convnets.py [--steps 10] [--rounds 3] [--time-batch 8] [--threads N]

1. Kernels per training step of examples/dcgan.py at batch 128 (the profile's batch),
   beside PyTorch's 506 CUDA kernels from ../shared/reference/dcgan_kernel_profile.txt,
   and of examples/resnet18.py at batch 32, 224x224 (the profile's shapes).
2. Seconds per training step of DCGAN and of ResNet-18 (64x64 images, 10 classes) at
   `--time-batch` on `--backend` (the default backend if not given), and PyTorch
   eager's seconds for the same model and step on the CPU, or on the GPU with
   `--backend cuda` (when torch is importable; benchmarks/torch_convnets.py). PyTorch
   runs one untimed step first (allocator, oneDNN's or cuDNN's algorithm choice), and
   gradfuse one untimed run of its `--steps` steps (the library's load, the first touch
   of its buffers' pages; on the GPU module load and graph capture); gradfuse's compile
   is not timed. Each side is timed `--rounds` times, the two taking turns, and the
   best of each is kept, as `timeit` does: the machine is shared, and a slow run
   measures its other load, not the code. A step's time is a run's over its steps: a
   gradfuse run also copies the params' first values in (ResNet-18: 45 MB) and hands
   its last values to the model, a cost of the run, not of a step (2-core Zen 4, one
   thread, 2026-12-02: 12 ms a run, 22 ms while the last values were copied back too),
   hence 10 steps a run by default, where training runs thousands.
   Both sides train on one fixed batch, drawn once (PyTorch's side draws its tensors
   once; gradfuse's feeders return the example's first batch every step, so the timed
   step holds no NumPy random draws: ResNet-18 b8's cost 1.7 ms a step).
   `--no-resnet` times DCGAN only.

    .venv/bin/python benchmarks/convnets.py --backend cuda --time-batch 128 --steps 10
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
from threads import add_threads_option, use_threads  # benchmarks/threads.py
from timing import best_of  # benchmarks/timing.py

import gradfuse

ROOT = Path(__file__).resolve().parents[1]
TORCH_DCGAN_KERNELS = 506  # ../shared/reference/dcgan_kernel_profile.txt, one step
RESNET_IMAGE, RESNET_CLASSES = 64, 10  # the timed ResNet-18's images and classes


def example(name: str, **sizes: int) -> ModuleType:
    """examples/<name>.py as a new module object (its `main` not run), with its module
    constants set to `sizes` (`example("dcgan", BATCH=8)`)."""
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for key, value in sizes.items():
        setattr(module, key, value)
    return module


def kernels_per_step(name: str, **sizes: int) -> tuple[int, float]:
    """Kernels per training step of an example at `sizes`, and the trace+compile seconds."""
    module = example(name, **sizes)
    gradfuse.reset()
    start = time.perf_counter()
    module.record(steps=1, log_every=1)
    program = gradfuse.compile("numpy")  # the fused program: the same kernels as c and cuda
    return program.kernels_per_iteration, time.perf_counter() - start


class FixedBatch:
    """An example's `Data` that returns its first batch at every call: the batch that a
    feeder gives each step is drawn once, as the PyTorch side's tensors are."""

    def __init__(self, data: object) -> None:
        self.data = data
        self.drawn: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> Callable[[], np.ndarray]:
        source = getattr(self.data, name)

        def fixed() -> np.ndarray:
            if name not in self.drawn:
                self.drawn[name] = source()
            return self.drawn[name]

        return fixed


def gradfuse_steps(
    name: str, steps: int, backend: str | None, **sizes: int
) -> tuple[Callable[[], None], str]:
    """A run of `steps` training steps of an example at `sizes` on `backend` (compiled
    here, and run once untimed), and the backend's name."""
    module = example(name, **sizes)
    gradfuse.reset()
    module.record(steps=steps, log_every=steps, data=FixedBatch(module.Data()))
    program = gradfuse.compile(backend)
    program.run()  # the untimed first run (library load, first touch of the buffers)
    return program.run, program.backend


def torch_steps(model: str, batch: int, steps: int, device: str) -> Callable[[], None] | None:
    """A run of `steps` PyTorch eager steps of `model` ("dcgan" or "resnet18") on
    `device`, after one untimed step; None where torch is not importable."""
    try:
        import torch
        from torch_convnets import dcgan_step, resnet18_step  # benchmarks/torch_convnets.py
    except ImportError:
        return None
    if model == "dcgan":
        step = dcgan_step(batch, device)
    else:
        step = resnet18_step(batch, RESNET_IMAGE, RESNET_CLASSES, device)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    step()  # the untimed first step (allocator, oneDNN's or cuDNN's algorithm choice)
    sync()

    def run() -> None:
        for _ in range(steps):
            step()
        sync()

    return run


def compare(
    title: str, model: str, batch: int, steps: int, backend: str | None, rounds: int
) -> None:
    """Prints gradfuse's and PyTorch eager's time per step of `model` (each the best of
    `rounds` runs, the two taking turns) and their ratio."""
    sizes = {"BATCH": batch}
    if model == "resnet18":
        sizes |= {"IMAGE": RESNET_IMAGE, "NUM_CLASSES": RESNET_CLASSES}
    ours, name = gradfuse_steps(model, steps, backend, **sizes)
    device = "cuda" if name == "cuda" else "cpu"
    theirs = torch_steps(model, batch, steps, device)
    best = [t / steps for t in best_of(rounds, [ours] if theirs is None else [ours, theirs])]
    print(f"{title} step, gradfuse {name}: {best[0] * 1e3:.2f} ms (best of {rounds})")
    if theirs is None:
        print("PyTorch: not importable here, no ratio")
        return
    print(
        f"{title} step, PyTorch {device.upper()} eager: {best[1] * 1e3:.2f} ms (best of"
        f" {rounds}); speed ratio gradfuse/PyTorch {best[1] / best[0]:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps a timed run")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each, taking turns")
    parser.add_argument("--time-batch", type=int, default=8)
    parser.add_argument("--backend", default=None, help="gradfuse backend (default: its default)")
    parser.add_argument("--no-resnet", action="store_true", help="time DCGAN only")
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    count, seconds = kernels_per_step("dcgan", BATCH=128)
    print(f"DCGAN, batch 128: {count} kernels per step (PyTorch eager: {TORCH_DCGAN_KERNELS});"
          f" {count / TORCH_DCGAN_KERNELS:.2f} of PyTorch's; trace+compile {seconds:.1f} s")  # fmt: skip
    count, seconds = kernels_per_step("resnet18", BATCH=32, IMAGE=224, NUM_CLASSES=1000)
    print(f"ResNet-18, batch 32, 224x224: {count} kernels per step; trace+compile {seconds:.1f} s")
    batch = args.time_batch
    compare(f"DCGAN, batch {batch},", "dcgan", batch, args.steps, args.backend, args.rounds)
    if not args.no_resnet:
        title = f"ResNet-18, batch {batch}, {RESNET_IMAGE}x{RESNET_IMAGE},"
        compare(title, "resnet18", batch, args.steps, args.backend, args.rounds)


if __name__ == "__main__":
    main()
