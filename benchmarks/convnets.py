"""Convolutional training steps (issue 7): kernels per step against PyTorch's profile,
and step time on the C backend against PyTorch CPU eager, measured in one run.

    .venv/bin/python benchmarks/convnets.py [--steps 2] [--time-batch 8] [--threads N]

1. Kernels per training step of examples/dcgan.py at batch 128 (the profile's batch),
   beside PyTorch's 506 CUDA kernels from ../shared/reference/dcgan_kernel_profile.txt,
   and of examples/resnet18.py at batch 32, 224x224 (the profile's shapes).
2. Seconds per DCGAN step at `--time-batch` on `--backend` (the default backend if not
   given), and PyTorch eager's seconds for the same model and step on the CPU, or on
   the GPU with `--backend cuda` (when torch is importable). On the GPU both sides run
   one untimed step first (module load, graph capture, cuDNN's algorithm choice).

    .venv/bin/python benchmarks/convnets.py --backend cuda --time-batch 128 --steps 10
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

from threads import add_threads_option, use_threads  # benchmarks/threads.py

import gradfuse

ROOT = Path(__file__).resolve().parents[1]
TORCH_DCGAN_KERNELS = 506  # ../shared/reference/dcgan_kernel_profile.txt, one step


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def kernels_per_step(name: str, **sizes: int) -> tuple[int, float]:
    """Kernels per training step of an example at `sizes`, and the trace+compile seconds."""
    module = example(name)
    for key, value in sizes.items():
        setattr(module, key, value)
    gradfuse.reset()
    start = time.perf_counter()
    module.record(steps=1, log_every=1)
    program = gradfuse.compile("numpy")  # the fused program: the same kernels as c and cuda
    return program.kernels_per_iteration, time.perf_counter() - start


def dcgan_step_time(batch: int, steps: int, backend: str | None) -> tuple[float, str]:
    """Seconds per DCGAN step on `backend` (compile excluded), and the backend's name."""
    module = example("dcgan")
    module.BATCH = batch
    gradfuse.reset()
    module.record(steps=steps, log_every=steps)
    program = gradfuse.compile(backend)
    if program.backend == "cuda":
        program.run()  # the untimed first run
    start = time.perf_counter()
    program.run()
    return (time.perf_counter() - start) / steps, program.backend


def torch_dcgan_step_time(batch: int, steps: int, device: str = "cpu") -> float | None:
    """Seconds per step of the PyTorch DCGAN tutorial's step, eager on `device`."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    nz, ngf, ndf, nc = 100, 64, 64, 1
    g = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
        nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip
    d = nn.Sequential(
        nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
    )  # fmt: skip
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loss = nn.BCELoss()
    g, d = g.to(device), d.to(device)
    real, noise = torch.randn(batch, nc, 64, 64), torch.randn(batch, nz, 1, 1)
    real, noise = real.to(device), noise.to(device)
    ones, zeros = torch.ones(batch, device=device), torch.zeros(batch, device=device)

    def step() -> None:
        d.zero_grad()
        loss(d(real).view(-1), ones).backward()
        fake = g(noise)
        loss(d(fake.detach()).view(-1), zeros).backward()
        opt_d.step()
        g.zero_grad()
        loss(d(fake).view(-1), ones).backward()
        opt_g.step()

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    if device == "cuda":
        step()  # the untimed first step
        sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--time-batch", type=int, default=8)
    parser.add_argument("--backend", default=None, help="gradfuse backend (default: its default)")
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    count, seconds = kernels_per_step("dcgan", BATCH=128)
    print(f"DCGAN, batch 128: {count} kernels per step (PyTorch eager: {TORCH_DCGAN_KERNELS});"
          f" {count / TORCH_DCGAN_KERNELS:.2f} of PyTorch's; trace+compile {seconds:.1f} s")  # fmt: skip
    count, seconds = kernels_per_step("resnet18", BATCH=32, IMAGE=224, NUM_CLASSES=1000)
    print(f"ResNet-18, batch 32, 224x224: {count} kernels per step; trace+compile {seconds:.1f} s")
    ours, backend = dcgan_step_time(args.time_batch, args.steps, args.backend)
    print(f"DCGAN step, batch {args.time_batch}, gradfuse {backend}: {ours * 1e3:.2f} ms")
    device = "cuda" if backend == "cuda" else "cpu"
    theirs = torch_dcgan_step_time(args.time_batch, args.steps, device)
    if theirs is None:
        print("PyTorch: not importable here, no ratio")
        return
    print(
        f"DCGAN step, PyTorch {device.upper()} eager: {theirs * 1e3:.2f} ms;"
        f" speed ratio gradfuse/PyTorch {theirs / ours:.2f}x"
    )


if __name__ == "__main__":
    main()
