"""`tg.allreduce` on a GPU (gradfuse/backend/cuda/nccl.py): the parts of NCCL that run
without one. `ncclCommInitRank` and `ncclAllReduce` need a GPU (tests/gpu when one is
lent); here the library loads from the nvidia-nccl-cu13 wheel when it is installed (it
is 300 MB and not a dependency: these tests skip without it), an id is drawn, and the
enum values gradfuse passes are those of the wheel's own nccl.h."""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from gradfuse.backend.cuda import nccl
from gradfuse.diagnostics import GradfuseError


def header() -> str:
    wheel = pytest.importorskip("nvidia.nccl", reason="pip install nvidia-nccl-cu13")
    return (Path(list(wheel.__path__)[0]) / "include" / "nccl.h").read_text()


def test_the_enum_values_are_those_of_nccl_h():
    text = header()
    for name, value in (("ncclFloat32", nccl.TYPES[np.dtype(np.float32)]),
                        ("ncclFloat64", nccl.TYPES[np.dtype(np.float64)]),
                        ("ncclSum", nccl.OPS["sum"]), ("ncclAvg", nccl.OPS["mean"])):  # fmt: skip
        assert re.search(rf"\b{name}\s*=\s*{value}\b", text), name
    assert re.search(r"char internal\[NCCL_UNIQUE_ID_BYTES\]", text)
    assert "#define NCCL_UNIQUE_ID_BYTES 128" in text
    assert ctypes.sizeof(nccl.UniqueId) == 128


def test_a_unique_id_is_drawn_without_a_gpu():
    header()
    lib = nccl.Nccl()
    first, second = bytes(lib.unique_id()), bytes(lib.unique_id())  # (.internal stops at a 0)
    assert len(first) == 128 and first != second and any(first)


def test_without_nccl_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.nccl", None)  # import nvidia.nccl -> ImportError

    def missing(name: str, *args: object, **kwargs: object) -> ctypes.CDLL:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(nccl.ctypes, "CDLL", missing)
    with pytest.raises(GradfuseError, match=r"needs NCCL: pip install nvidia-nccl-cu13"):
        nccl.library()


SCRIPT = """
import gradfuse.distributed as dist
from gradfuse.backend.cuda.nccl import Nccl
from gradfuse.diagnostics import GradfuseError
dist.init_process_group()
try:
    Nccl().communicator()
    print("rank", dist.get_rank(), "made a communicator")
except GradfuseError as e:
    print("rank", dist.get_rank(), "error:", e.message)
"""


def test_the_ranks_share_rank_0s_id_and_a_gpuless_init_fails_in_one_sentence():
    """Under mpirun -n 2 both ranks get rank 0's id over MPI and call ncclCommInitRank
    (the id passed by value, 128 bytes): without a GPU both fail at once with NCCL's own
    reason, and nothing waits for a rank that never came."""
    import os
    import shutil
    import subprocess

    header()
    here = Path(sys.executable).parent
    mpirun = shutil.which("mpirun", path=f"{here}{os.pathsep}{os.environ.get('PATH', '')}")
    if mpirun is None:
        pytest.skip("mpirun is the extra gradfuse[mpi]")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd = [mpirun, "-n", "2", "--oversubscribe", sys.executable, "-c", SCRIPT]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    if "made a communicator" in said:  # a machine with GPUs: both ranks made one
        assert said.count("made a communicator") == 2, said
        return
    for rank in (0, 1):
        assert f"rank {rank} error: ncclCommInitRank failed:" in said, said
