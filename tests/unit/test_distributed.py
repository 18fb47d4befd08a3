"""gradfuse.distributed: `tg.allreduce` in a world of one on every backend, the API's
errors, and data-parallel runs under `mpirun -n 2` (tests/unit/ddp_train.py) against
the same training in one process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from compiled import needs_mpicc  # tests/unit
from ddp_compare import assert_ranks_train_as_one_process, ranks_and_one_process

import gradfuse
import gradfuse.distributed as dist
from gradfuse import Feeder, Receiver, ir_for
from gradfuse.backend import mpi
from gradfuse.backend.torchrun import mpirun_path
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.parser import parse_tg
from gradfuse.nn import Linear

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "ddp_train.py"
MPIRUN = mpirun_path()
needs_mpi = pytest.mark.skipif(
    MPIRUN is None or not dist.is_available(),
    reason="mpirun and mpi4py are the extra gradfuse[mpi] (.ci/run installs it)",
)

PROGRAM = """
func @main(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %w = tg.param "w" init=0.5 : tensor<2x3xf32>
  %a = tg.mul %x, %w : tensor<2x3xf32>
  %m = tg.allreduce %a reduce="mean" : tensor<2x3xf32>
  %s = tg.allreduce %m reduce="sum" : tensor<2x3xf32>
  %l = tg.mul %s, %s : tensor<2x3xf32>
  %g = tg.grad %l wrt %w : tensor<2x3xf32>
  return %s, %g
}
"""


@pytest.mark.parametrize(
    "backend", ["reference", "numpy", "lowered", pytest.param("c", marks=needs_mpicc), "cuda-emu"]
)
def test_an_allreduce_in_a_world_of_one_is_the_identity(backend):
    """Without a process group (one process), sum and mean over the ranks are the value
    itself, and so is the all-reduce of its cotangent: d(s^2)/dw = 2 s x."""
    from gradfuse.backend import compile_module

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    result = compile_module(parse_tg(PROGRAM), backend).run(args=[x])
    s, g = result.results
    np.testing.assert_allclose(s, 0.5 * x)
    np.testing.assert_allclose(g, 2 * (0.5 * x) * x, rtol=1e-6)


def test_the_api_needs_a_process_group_as_pytorch_does():
    gradfuse.reset()
    t = Feeder(lambda: np.ones(3, np.float32), shape=[3], name="t")
    with pytest.raises(GradfuseError, match="Default process group has not been initialized"):
        dist.all_reduce(t)
    with pytest.raises(GradfuseError, match="Default process group has not been initialized"):
        dist.DistributedDataParallel(Linear(3, 3))
    with pytest.raises(GradfuseError, match="has not been initialized"):
        dist.get_rank()
    gradfuse.reset()


def test_without_mpi4py_init_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py -> ImportError
    with pytest.raises(GradfuseError, match=r"pip install 'gradfuse\[mpi\]'"):
        dist.init_process_group()
    assert not dist.is_initialized()


def test_the_launcher_variables_give_rank_and_size():
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}  # fmt: skip
    assert dist.launched_by(ompi) == ("mpirun", 1, 4, 1)
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}
    assert dist.launched_by(torchrun) == ("torchrun", 3, 8, 1)
    assert dist.launched_by({}) == ("python", 0, 1, 0)


@needs_mpi
def test_processes_that_mpi_did_not_start_together_are_refused(monkeypatch):
    """Processes that a launcher other than one mpirun started (here MPICH's variables
    say 2) each start MPI alone: a world of 1, refused with the command to run."""
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setattr(sys, "argv", ["train.py", "--epochs", "3"])
    with pytest.raises(GradfuseError, match="mpirun started 2 processes, but MPI joined 1") as e:
        dist.init_process_group("nccl")
    assert "launch with mpirun -n 2 python train.py --epochs 3" in str(e.value)
    with pytest.raises(GradfuseError, match='backend "ucc" is not one gradfuse runs'):
        dist.init_process_group("ucc")
    assert not dist.is_initialized()


def test_receivers_call_back_on_rank_0_only(monkeypatch):
    """In a data-parallel run (here a pretend rank 1 of 2) receivers' callbacks run on
    rank 0 only; `receive_on_all_ranks()` runs them everywhere."""
    got: list[np.ndarray] = []

    def record() -> None:
        gradfuse.reset()
        ir_for(range(2), lambda: Receiver(got.append, [Feeder(lambda: np.ones(2, np.float32), shape=[2])], name="r"))  # fmt: skip

    monkeypatch.setattr(mpi, "_world", mpi.World(1, 2, 1, None, "mpirun"))
    record()
    gradfuse.execute(backend="reference")
    assert got == []
    dist.receive_on_all_ranks()
    try:
        record()
        gradfuse.execute(backend="reference")
    finally:
        dist.receive_on_all_ranks(False)
    assert len(got) == 2


def test_convert_sync_batchnorm_keeps_params_buffers_and_order():
    """As PyTorch's: every BatchNorm*d becomes a SyncBatchNorm in its place, holding the
    same Parameter and Buffer objects (an optimizer made before still trains them), and
    the state_dict keeps its names and order."""
    from gradfuse.nn import BatchNorm1d, BatchNorm2d, Conv2d, ReLU, Sequential, SyncBatchNorm

    model = Sequential(Conv2d(3, 4, 3), BatchNorm2d(4), ReLU(), Sequential(BatchNorm1d(4)))
    before = list(model.state_dict())
    weight = model[1].weight
    converted = SyncBatchNorm.convert_sync_batchnorm(model)
    assert converted is model
    assert [type(m).__name__ for m in model] == ["Conv2d", "SyncBatchNorm", "ReLU", "Sequential"]
    assert type(model[3][0]) is SyncBatchNorm and model[1].weight is weight
    assert list(model.state_dict()) == before
    assert type(SyncBatchNorm.convert_sync_batchnorm(BatchNorm2d(2))) is SyncBatchNorm
    with pytest.raises(GradfuseError, match="process_group= is not supported"):
        SyncBatchNorm(4, process_group=object())


@pytest.mark.parametrize("backend", ["reference", pytest.param("c", marks=needs_mpicc)])
def test_synced_batch_statistics_in_a_world_of_one_are_the_batchs(monkeypatch, backend):
    """SyncBatchNorm's statistics (channel sums and the count in one buffer, all-reduced,
    then divided) in a world of one normalise as the batch's own, forward and backward,
    and update the running statistics alike: two float32 evaluations of the same
    formulas that differ in the rounding of the mean (a sum divided by the count
    against a mean), about 1e-7 relative for values of order 1; 1e-5 is 100x that."""
    from gradfuse.frontend import functional_conv as F
    from gradfuse.frontend.nn.batchnorm import synced_batch_mean
    from gradfuse.nn import Parameter

    monkeypatch.setattr(mpi, "_world", mpi.World(0, 1, 0, None, "python"))
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * 2 + 1
    r = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    runs = []
    for batch_mean in (None, synced_batch_mean):
        gradfuse.reset()
        x, w = Parameter(x0.copy()), Parameter(np.full(3, 1.5, np.float32))
        rm, rv = Parameter(np.zeros(3, np.float32)), Parameter(np.ones(3, np.float32))
        got: list[tuple[np.ndarray, ...]] = []

        def step(x=x, w=w, rm=rm, rv=rv, got=got, batch_mean=batch_mean) -> None:
            y = F.batch_norm(x, rm, rv, w, None, training=True, batch_mean=batch_mean)
            (y * gradfuse.constant(r)).sum().backward()
            Receiver(lambda *v: got.append(v), [y, x.grad, w.grad])

        ir_for(range(1), step)
        gradfuse.execute(backend=backend)
        runs.append([*got[0], rm.data.copy(), rv.data.copy()])
    gradfuse.reset()
    for plain, synced in zip(*runs):
        np.testing.assert_allclose(synced, plain, rtol=1e-5, atol=1e-6)


def mpirun(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`mpirun -n 2 python ddp_train.py args...` (as root too, as CI runs)."""
    env = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [str(MPIRUN), "-n", "2", "--oversubscribe", sys.executable, str(TRAIN), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@needs_mpi
@pytest.mark.parametrize(
    ("model", "backend"),
    [("mlp", "reference"), ("mlp", "c"), ("transformer", "c"), ("mlp", "cuda-emu")],
)
def test_two_ranks_train_as_one_process_on_the_whole_batch(tmp_path, model, backend):
    """Two ranks with 4 samples each (DistributedDataParallel: gradients averaged by one
    all-reduce a backward) end with the params of one process trained on all 8, and
    with bitwise the same params as each other (every rank adds the same all-reduced
    gradients in the same order). Against one process the sums over the batch are
    grouped differently (4 + 4, then halved). Measured against the same training in float64
    (one process, reference): the two-rank and the one-process float32 params on c both
    come within 0.022 (MLP) and 0.024 (transformer) of this tolerance (rtol 1e-5, atol
    1e-7), and within 0.025 of it of each other: float32 rounding alone, so another CPU's
    FMA and vector widths, which change the rounding and not its size, leave 40x. On the
    emulated CUDA device the all-reduce is MPI on its memory, in stream order, where a
    GPU runs ncclAllReduce (tests/unit/backend/test_cuda_nccl.py)."""
    done = mpirun(model, backend, "ddp", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert_ranks_train_as_one_process(tmp_path, model, backend)


def test_no_sync_records_no_all_reduce_and_the_next_backward_one(monkeypatch):
    """Two backward()s a step, the first inside `no_sync()`: one `tg.allreduce` a step
    (two without `no_sync`), and `.grad` after the step is the sum of both backwards'
    gradients (a world of one: the all-reduce is the identity)."""
    from gradfuse.frontend.recorder import program
    from gradfuse.passes import run_pipeline

    monkeypatch.setattr(mpi, "_world", mpi.World(0, 1, 0, None, "python"))
    counts, grads = [], []
    for use_no_sync in (True, False):
        gradfuse.reset()
        gradfuse.manual_seed(0)
        model = dist.DistributedDataParallel(Linear(3, 2))
        x = Feeder(lambda: np.ones((2, 3), np.float32), shape=[2, 3], name="x")
        got: list[np.ndarray] = []

        def step(model=model, x=x, got=got, use_no_sync=use_no_sync) -> None:
            model.module.weight.grad = None
            if use_no_sync:
                with model.no_sync():
                    model(x).sum().backward()
            else:
                model(x).sum().backward()
            (model(x) * 2.0).sum().backward()
            Receiver(got.append, [model.module.weight.grad])

        ir_for(range(1), step)
        module = program().module.clone()
        run_pipeline(module, "tg")
        counts.append(sum(op.name == "tg.allreduce" for op in module.walk()))
        gradfuse.execute(backend="reference")
        grads.append(got[0])
    gradfuse.reset()
    assert counts == [1, 2]
    np.testing.assert_allclose(grads[0], np.full((2, 3), 6.0))  # (1 + 2) x 2 rows of ones
    np.testing.assert_allclose(grads[1], grads[0])


@needs_mpi
def test_gradients_accumulated_under_no_sync_are_averaged_at_the_next_backward(tmp_path):
    """Each rank's 4 samples as two micro-batches (losses halved), the first backward
    inside `model.no_sync()`: the second averages the accumulated `.grad`, and the run
    ends with one process's params on all 8 and bitwise equal ranks (the tolerance of
    the MLP comparison above: the same sums, grouped 2 + 2 on each rank)."""
    done = mpirun("mlp", "c", "accum", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert_ranks_train_as_one_process(tmp_path, "mlp", "c", "accum")


@needs_mpi
def test_each_rank_ends_where_pytorchs_distributed_data_parallel_ends(tmp_path):
    """A model with a batch norm (running statistics: buffers) under DDP on two ranks,
    against PyTorch's own DistributedDataParallel (gloo, two processes, tests/unit/
    ddp_torch.py) from the same state on the same data: rank by rank, every param and
    buffer agrees. The buffers are the test: PyTorch broadcasts rank 0's at each forward
    (broadcast_buffers=True), then each rank's batch norm updates them from its own
    batch, so the ranks' running statistics end apart, and equal to PyTorch's rank by
    rank (without the broadcast rank 1's running mean is 6e5 times the tolerance away).
    Against PyTorch's float64 run of the same DDP: ours within 0.04 (rank 0) and 0.08
    (rank 1) of the tolerance (rtol 1e-5, atol 1e-7), PyTorch's float32 within 0.06,
    the two within 0.10 of each other: float32 rounding, 10x inside the tolerance."""
    pytest.importorskip("torch")
    done = mpirun("bn", "c", "ddp", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    theirs = subprocess.run(
        [sys.executable, str(HERE / "ddp_torch.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert theirs.returncode == 0, theirs.stderr
    ranks = [np.load(tmp_path / f"ddp_{r}.npz") for r in (0, 1)]
    assert not np.array_equal(ranks[0]["model.1.running_mean"], ranks[1]["model.1.running_mean"])
    for rank, ours in enumerate(ranks):
        want = np.load(tmp_path / f"torch_{rank}.npz")
        assert sorted(f"model.{k}" for k in want) == sorted(ours)
        for key in want:
            got = ours[f"model.{key}"]
            np.testing.assert_allclose(got, want[key], rtol=1e-5, atol=1e-7, err_msg=key)


@needs_mpi
@pytest.mark.parametrize("backend", ["reference", "c"])
def test_two_ranks_train_dcgan_with_sync_batch_norm_as_one_process(tmp_path, backend):
    """examples/dcgan.py's step (small channels, 64x64 images) on two ranks of 4 samples,
    batch norms converted to SyncBatchNorm, ends with the params, running statistics and
    batch counts of one process trained on all 8 (plain BatchNorm2d), bitwise the same
    on both ranks. Without the sync each rank normalises its own 4 samples, and the
    generator's first weights end 15 % (in norm) from one process's.

    Per tensor, in norm, measured against PyTorch's float64 run of the same two steps
    (the worst tensor of each run; PyTorch's own float32 is within 2.6e-6 of it):
    - Zen 3 (AVX2): c one process 3.2e-6, two ranks 2.3e-6, 4.5e-6 apart; reference
      1.1e-6 and 1.4e-6;
    - Sapphire Rapids, c: 1.65e-5 and 5.5e-6 (2.2e-5 apart) with -march=native, whose
      `omp simd` sums gcc vectorises 16 lanes wide; 4.2e-6 and 3.0e-6 with x86-64-v3,
      3.5e-6 and 1.9e-6 with the portable flags.
    float32's rounding, whose order another CPU's vector width changes: a batch norm's
    backward kernel alone, on the same inputs, is 1.0e-6 from its float64 at 16 lanes
    and 5.8e-7 at 8, and two steps of training amplify that about 16 times. 1e-4 is 4.6
    times the worst distance apart measured, and 1,500 times below the 15 % of a run
    without the sync. The data (seed 9) keeps every ReLU and LeakyReLU input at least
    9e-6 of its layer's mean magnitude from 0 in float64 (the best of seeds 1-59; seed
    1 had one at 2.7e-7): a float32 run that rounds such an input to the other side of
    0 flips its mask, and gradients that are nearly cancelling sums (the bias of a batch
    norm below another batch norm) then move by 1e-2 (1.6e-2 on the reference at seed
    1), in one run and not the other. Two steps for the same reason: each step adds
    activations."""
    done = mpirun("dcgan", backend, "ddp", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    ranks, alone = ranks_and_one_process(tmp_path, "dcgan", backend)
    assert "g.main.1.running_var" in alone
    for key in alone:
        apart = np.linalg.norm(ranks[0][key] - alone[key])
        assert apart <= 1e-4 * np.linalg.norm(alone[key]), (key, apart)


@needs_mpi
@pytest.mark.parametrize("how", ["fail", "kill"])
def test_a_rank_that_fails_or_dies_stops_the_job(tmp_path, how):
    """Rank 1 fails (an exception in its feeder) or is killed before the first
    all-reduce, where rank 0 waits for it: the job ends with an error naming rank 1
    within seconds, and nothing hangs (the timeout would fail the test)."""
    start = time.monotonic()
    done = mpirun("mlp", "reference", how, str(tmp_path), timeout=120)
    assert done.returncode != 0
    assert time.monotonic() - start < 120
    said = done.stdout + done.stderr
    if how == "fail":
        assert "gradfuse.distributed: rank 1 of 2 failed" in said
        assert "rank 1's data loader broke" in said
    else:
        assert "rank 1" in said and ("signal 9" in said or "Killed" in said), said
    assert not list(tmp_path.glob("fail_*.npz")) and not list(tmp_path.glob("kill_*.npz"))
