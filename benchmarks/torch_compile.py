"""`--torch-compile` for the benchmarks: also time PyTorch's `torch.compile`, in mode
"reduce-overhead" (CUDA graphs) on a GPU, where it is the default, and "default" on a
CPU.

parser = argparse.ArgumentParser(); add_torch_compile_option(parser)
if torch_compile_wanted(args.torch_compile, device): ... torch.compile(m, mode=mode(device))
for each training step: step_begin(compiled, device); ... model(x).backward() ...
"""

from __future__ import annotations

import argparse


def add_torch_compile_option(parser: argparse.ArgumentParser) -> None:
    """Adds `--torch-compile` / `--no-torch-compile` (default: on a GPU)."""
    parser.add_argument(
        "--torch-compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time torch.compile (default: on a GPU)",
    )


def torch_compile_wanted(flag: bool | None, device: str) -> bool:
    """The option's value, else whether PyTorch runs on the GPU."""
    return flag if flag is not None else device == "cuda"


def mode(device: str) -> str:
    """torch.compile's mode for `device`."""
    return "reduce-overhead" if device == "cuda" else "default"


def step_begin(compiled: bool, device: str) -> None:
    """Tells CUDA graph trees (mode "reduce-overhead") that a new training step starts.
    Without it, a step's forward replay overwrites the outputs that the last step's
    backward still reads, and PyTorch 2.11 stops with "accessing tensor output of
    CUDAGraphs that has been overwritten by a subsequent run" (seen on an H200)."""
    if compiled and device == "cuda":
        import torch

        torch.compiler.cudagraph_mark_step_begin()
