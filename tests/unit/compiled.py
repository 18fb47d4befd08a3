"""Shared checks for the compiled backends' tests (tests/unit/conftest.py puts this
folder on the path):

    from compiled import agree, needs_mpicc, needs_nvcc, nvcc_errors
    agree(src, "c", feeders={"x": xs})            # c against the reference, to 1e-5
    assert nvcc_errors(render_kernels(m, CUDATarget())) is None
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gradfuse.backend import compile_module
from gradfuse.frontend.parser import parse_tg

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _mpicc() -> bool:
    """Whether the c backend finds mpicc, with which it builds a `tg.allreduce`."""
    from gradfuse.backend.c import cache
    from gradfuse.diagnostics import GradfuseError

    try:
        cache.mpi_flags()
    except GradfuseError:
        return False
    return True


needs_mpicc = pytest.mark.skipif(
    not _mpicc(), reason="the c backend builds tg.allreduce with mpicc: gradfuse[mpi]"
)
"""A c-backend case of a program that all-reduces (in a world of one too): it needs the
extra gradfuse[mpi], which .ci/run installs and a bare `make test` does not."""


def nvcc_errors(source: str) -> str | None:
    """`nvcc -cubin -arch=sm_90` on a CUDA translation unit: None when it compiles, else
    nvcc's messages."""
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "kernels.cu"
        cu.write_text(source)
        done = subprocess.run(
            ["nvcc", "-cubin", "-arch=sm_90", "-w", "-o", str(Path(tmp) / "k.cubin"), str(cu)],
            capture_output=True,
            text=True,
        )
    return None if done.returncode == 0 else done.stderr


def agree(src: str, backend: str, pipeline: str | None = None, **run: Any) -> None:
    """The program on `backend` (after `pipeline`, else the backend's) and on the
    reference interpreter: results, params and received values equal to 1e-5."""
    want = compile_module(parse_tg(src), "reference").run(**run)
    got = compile_module(parse_tg(src), backend, pipeline=pipeline).run(**run)
    for a, b in zip(got.results, want.results, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in want.params:
        np.testing.assert_allclose(got.params[key], want.params[key], rtol=1e-5, atol=1e-6)
    for key, calls in want.received.items():
        for a, b in zip(got.received[key], calls, strict=True):
            np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
