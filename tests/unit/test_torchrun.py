"""`torchrun` launches: its workers hand the run over to mpirun
(gradfuse/backend/torchrun.py). A real `torchrun --nproc-per-node=2` of
tests/unit/ddp_train.py trains as one process on the whole batch, and a rank that
fails ends torchrun with an error that names it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ddp_compare import TRAIN, assert_ranks_train_as_one_process

import gradfuse.distributed as dist
from gradfuse.backend import torchrun
from gradfuse.diagnostics import GradfuseError

BIN = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
TORCHRUN = shutil.which("torchrun", path=BIN)
needs_torchrun = pytest.mark.skipif(
    TORCHRUN is None or torchrun.mpirun_path() is None or not dist.is_available(),
    reason="torchrun (torch) and mpirun (gradfuse[mpi]); .ci/run installs both",
)


@pytest.mark.skipif(not dist.is_available(), reason="mpi4py is gradfuse[mpi]")
def test_ranks_on_several_nodes_are_refused_with_the_command_to_run(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(GradfuseError, match="torchrun started 4 processes over 2 nodes") as e:
        dist.init_process_group("nccl")
    assert "mpirun -n 4 --hostfile HOSTS" in str(e.value)
    assert not dist.is_initialized()


@pytest.mark.skipif(torchrun.mpirun_path() is None, reason="mpirun is gradfuse[mpi]")
def test_a_worker_other_than_0_ends_and_leaves_the_run_to_worker_0(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    if not dist.is_available():
        pytest.skip("mpi4py is gradfuse[mpi]")
    with pytest.raises(SystemExit) as done:
        dist.init_process_group()
    assert done.value.code == 0
    assert "torchrun worker 1 ends here; worker 0 runs the 2 ranks" in capsys.readouterr().err


def test_each_rank_gets_torchruns_variables_from_mpiruns():
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "MASTER_PORT": "29500"}  # fmt: skip
    got = torchrun.as_torchrun_rank(env)
    assert {k: got[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert got["MASTER_PORT"] == "29500" and dist.launched_by(got)[:3] == ("mpirun", 1, 2)


def run_torchrun(*args: str) -> subprocess.CompletedProcess[str]:
    """`torchrun --standalone --nproc-per-node=2 ddp_train.py args...` (as root too)."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node=2", str(TRAIN), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@needs_torchrun
def test_torchrun_trains_two_ranks_as_one_process_on_the_whole_batch(tmp_path):
    """The MLP on c, 4 + 4 samples a step on two ranks that torchrun started: as under
    mpirun (test_distributed.py, whose tolerance this is, argued there), each rank's
    params equal one process's trained on all 8, and each other's bitwise."""
    done = run_torchrun("mlp", "c", "ddp", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert_ranks_train_as_one_process(tmp_path, "mlp", "c")


@needs_torchrun
def test_a_rank_that_fails_under_torchrun_ends_it_with_an_error_naming_the_rank(tmp_path):
    done = run_torchrun("mlp", "reference", "fail", str(tmp_path))
    assert done.returncode != 0
    assert "rank 1 of 2 failed" in done.stderr and "ChildFailedError" in done.stderr
