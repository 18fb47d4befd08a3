"""`--torch-compile` for the benchmarks: also time PyTorch's `torch.compile`, in mode
"reduce-overhead" (CUDA graphs) on a GPU, where it is the default, and "default" on a
CPU.

parser = argparse.ArgumentParser(); add_torch_compile_option(parser)
if torch_compile_wanted(args.torch_compile, device): ... torch.compile(m, mode=mode(device))
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
