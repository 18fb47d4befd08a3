"""`ir-opt -t c` and `-t cuda`: whole translation units from lowered IR.

ir-opt model.tg -p default -t c      # kernels and host program, for gcc
ir-opt model.tg -p cpu -t c          # the same from loop nests (the `cpu` pipeline)
ir-opt model.tg -p default -t cuda   # the kernels, for nvcc
"""

from __future__ import annotations

from typing import IO

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from gradfuse.diagnostics import GradfuseError, Position
from gradfuse.passes.loops.loop_ir import is_kernel


def check_entry(module: ModuleOp, source: str, entry: str = "main") -> None:
    """The C program's host code is the function @main (or the only function): one
    located sentence, at the start of the input, when there is none."""
    names = [
        op.sym_name.data
        for op in module.ops
        if isinstance(op, func.FuncOp) and op.body.blocks and not is_kernel(op)
    ]  # (not the declarations of host callbacks, as `runner.entry_function`)
    if entry in names or len(names) == 1:
        return
    listed = ", ".join(f"@{n}" for n in names) or "none"
    raise GradfuseError(
        f"-t c needs a function @{entry} (or a single function) for the host program;"
        f" this module has {listed}",
        Position(source, 1, 1),
    )


def print_c(module: ModuleOp, out: IO[str], source: str = "-") -> None:
    """Writes the C translation unit of a lowered module (`source`: the input's name,
    where a missing entry function is reported)."""
    from gradfuse.backend.c.host import render_c

    check_entry(module, source)
    out.write(render_c(module))


def print_cuda(module: ModuleOp, out: IO[str], source: str = "-") -> None:
    """Writes the CUDA C translation unit of a lowered module's kernels."""
    from gradfuse.backend.cstyle import CUDATarget, render_kernels

    out.write(render_kernels(module, CUDATarget()))
