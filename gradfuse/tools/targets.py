"""`ir-opt -t c` and `-t cuda`: whole translation units from lowered IR.

    ir-opt model.tg -p default -t c      # kernels and host program, for gcc
    ir-opt model.tg -p default -t cuda   # the kernels, for nvcc
"""

from __future__ import annotations

from typing import IO

from xdsl.dialects.builtin import ModuleOp


def print_c(module: ModuleOp, out: IO[str]) -> None:
    """Writes the C translation unit of a lowered module."""
    from gradfuse.backend.c.host import render_c

    out.write(render_c(module))


def print_cuda(module: ModuleOp, out: IO[str]) -> None:
    """Writes the CUDA C translation unit of a lowered module's kernels."""
    from gradfuse.backend.cstyle import CUDATarget, render_kernels

    out.write(render_kernels(module, CUDATarget()))
