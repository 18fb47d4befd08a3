"""Compiler failures on generated code, told in the user's terms.

gcc or nvcc name a line of the generated source; the kernel whose function holds
that line, and its provenance (the user's file and line, module path, direction),
say what the user wrote that led there:

    gcc failed on kernel k3 (fused from model.py:12 encoder.layers.0 (backward)):
    program.c:88:5: error: ...; source: ~/.cache/gradfuse/c/3f2a...-failed.c
"""

from __future__ import annotations

import re
from pathlib import Path

from xdsl.dialects import func, gpu
from xdsl.dialects.builtin import FusedLoc, ModuleOp
from xdsl.ir import Attribute

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.provenance import provenance_of

KERNELS = (gpu.FuncOp, func.FuncOp)
"""What a kernel is compiled from: a `gpu.func`, or a `func.func` of the `cpu` pipeline."""

HEADER = re.compile(
    r'^(?:static void|extern "C" __global__ void|__attribute__\(\(visibility\("hidden"\)\)\) void) (\w+)\('
)


def kernel_at(source: str, line: int) -> str | None:
    """The name of the generated kernel function whose text holds `line` (1-based)."""
    name = None
    for k, text in enumerate(source.splitlines()[:line], start=1):
        found = HEADER.match(text)
        if found:
            name = found.group(1)
        elif text.startswith("}") and k < line:
            name = None
    return name


def _provenance(loc: Attribute) -> str:
    locs = list(loc.locations) if isinstance(loc, FusedLoc) else [loc]
    return "; ".join(dict.fromkeys(str(provenance_of(one)) for one in locs))


def compile_error(
    compiler: str, source: str, stderr: str, kept: Path, module: ModuleOp | None
) -> GradfuseError:
    """The error for `compiler` failing on `source` (kept at `kept`): the first message,
    the kernel it is in with that kernel's provenance, and the source's path."""
    lines = [
        ln for ln in stderr.strip().splitlines() if "error" in ln
    ] or stderr.strip().splitlines()
    first = lines[0] if lines else "no message"
    where = re.search(r":(\d+):(?:\d+:)? ", first) or re.search(r"\((\d+)\): error", first)
    name = kernel_at(source, int(where.group(1))) if where else None
    fn = None
    if name is not None and module is not None:
        fn = next(
            (op for op in module.walk() if isinstance(op, KERNELS) and op.sym_name.data == name),
            None,
        )
    what = "the generated program"
    if name is not None:
        what = f"kernel {name}"
        if fn is not None:
            what += f" (fused from {_provenance(fn.location)})"
    position = position_of(fn.location) if fn is not None else None
    return GradfuseError(f"{compiler} failed on {what}: {first.strip()}; source: {kept}", position)
