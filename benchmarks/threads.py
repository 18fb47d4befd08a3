"""`--threads N` for the benchmarks: one thread count for gradfuse's C code and PyTorch.

parser = argparse.ArgumentParser(); add_threads_option(parser)
args = parser.parse_args(); use_threads(args.threads)
"""

from __future__ import annotations

import argparse
import os


def add_threads_option(parser: argparse.ArgumentParser) -> None:
    """Adds `--threads N` (default: each library its own default)."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for both (OMP_NUM_THREADS for gradfuse's C, torch.set_num_threads);"
        " default: each its own default",
    )


def use_threads(threads: int | None) -> None:
    """Sets the thread count for both, before gradfuse's C library is loaded."""
    if threads is None:
        return
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass
