"""Data-parallel training on the c backend: time per step on 1 and 2 ranks at a fixed
global batch, and the all-reduce's share of the step (issue 19).

    .venv/bin/python benchmarks/ddp.py [--steps N] [--models transformer dcgan]

Each configuration runs under `mpirun -n R` (this script again, as a worker), one
thread per rank: the transformer layer of benchmarks/transformer.py at a global batch
of 8 sequences (8, 16, 64), and DCGAN (examples/dcgan.py: nz 100, 64 channels, 64x64
images) at a global batch of 8 with its batch norms made `SyncBatchNorm`; 2 ranks
take 4 each. `gradfuse.profiler` times every step after the first (the profile build
of the same program) and, inside it, each `MPI_Allreduce` (Communication). Also 1 rank
with 2 threads, the same 2 cores used by one process. Bytes per step are those of the
step's `tg.allreduce` ops after autodiff (the gradients' flat buffers, and SyncBatchNorm's
statistics and their cotangents).

On a 2-core machine two ranks have the two cores that one rank with two threads also
has: the speed-up over one thread is bounded by 2, and over two threads it shows what
splitting the batch costs or saves against threading inside each kernel. Ranks are bound
to a core each (`--bind-to core`; unbound, a rank that the OS moves waits for the other
at every all-reduce: DCGAN's all-reduce share was 29 % unbound, 7 % bound); one rank is
left unbound so that its threads spread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from math import prod
from pathlib import Path

import numpy as np

import gradfuse
import gradfuse.distributed as dist
from gradfuse import Feeder, ir_for
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.frontend.recorder import program
from gradfuse.nn import SGD, BCELoss, SyncBatchNorm, TransformerEncoderLayer
from gradfuse.passes import run_pipeline
from gradfuse.profiler import profile, schedule

ROOT = Path(__file__).resolve().parents[1]
GLOBAL_BATCH = 8


def transformer(rank: int, per: int) -> Callable[[], None]:
    """Records the transformer layer's step (loss = output sum, SGD) on this rank's part."""
    gradfuse.manual_seed(0)
    model = TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = dist.DistributedDataParallel(model)
    opt = SGD(model.parameters(), lr=1e-3)
    x = np.random.default_rng(0).standard_normal((GLOBAL_BATCH, 16, 64)).astype(np.float32)
    mine = x[rank * per : (rank + 1) * per]

    def step() -> None:
        opt.zero_grad()
        model(Feeder(lambda: mine, shape=list(mine.shape), name="x")).sum().backward()
        opt.step()

    return step


def dcgan(rank: int, per: int) -> Callable[[], None]:
    """Records examples/dcgan.py's step (Adam, BCELoss) on this rank's part of a batch."""
    sys.path.insert(0, str(ROOT / "examples"))
    import dcgan as ex  # examples/dcgan.py

    gradfuse.manual_seed(0)
    net_g, net_d = ex.Generator(), ex.Discriminator()
    ex.weights_init(net_g, seed=0)
    ex.weights_init(net_d, seed=1)
    net_g, net_d = (
        dist.DistributedDataParallel(SyncBatchNorm.convert_sync_batchnorm(m))
        for m in (net_g, net_d)
    )
    rng = np.random.default_rng(0)
    images = np.tanh(rng.standard_normal((per, 1, 64, 64))).astype(np.float32)
    noise = rng.standard_normal((per, ex.NZ, 1, 1)).astype(np.float32)
    opt_d = gradfuse.nn.Adam(net_d.parameters(), lr=ex.LR, betas=ex.BETAS)
    opt_g = gradfuse.nn.Adam(net_g.parameters(), lr=ex.LR, betas=ex.BETAS)
    criterion = BCELoss()
    real, fake_label = (gradfuse.constant(np.full(per, v, np.float32)) for v in (1.0, 0.0))

    def step() -> None:
        opt_d.zero_grad()
        criterion(net_d(Feeder(lambda: images, shape=list(images.shape), name="images")), real).backward()  # fmt: skip
        fake = net_g(Feeder(lambda: noise, shape=list(noise.shape), name="noise"))
        criterion(net_d(fake.detach()), fake_label).backward()
        opt_d.step()
        opt_g.zero_grad()
        criterion(net_d(fake), real).backward()
        opt_g.step()

    return step


MODELS = {"transformer": transformer, "dcgan": dcgan}
STEPS = {"transformer": 200, "dcgan": 6}


def allreduce_bytes() -> tuple[int, int]:
    """The `tg.allreduce` ops of one step of the recorded program after autodiff: their
    number and bytes."""
    module = program().module.clone()
    run_pipeline(module, "tg")
    ops = [op for op in module.walk() if isinstance(op, tg.AllReduceOp)]
    return len(ops), sum(4 * prod(shape_of(op.results[0])) for op in ops)


def worker(model: str, steps: int, out: str) -> None:
    """One rank: records `steps` steps, profiles them on c, rank 0 writes the figures."""
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    ir_for(range(steps), MODELS[model](rank, GLOBAL_BATCH // size))
    count, nbytes = allreduce_bytes()
    with profile(schedule=schedule(wait=1, warmup=0, active=steps - 1)) as prof:
        gradfuse.execute(backend="c")
    step_us = [s.dur_us for s in prof.steps]
    talk_us = [sum(x.dur_us for x in s.spans if x.kind == "allreduce") for s in prof.steps]
    if rank == 0:
        figures = {
            "step_ms": statistics.median(step_us) / 1e3,
            "allreduce_ms": statistics.median(talk_us) / 1e3,
            "allreduces": count,
            "bytes": nbytes,
        }
        Path(out).write_text(json.dumps(figures))


def launch(model: str, ranks: int, threads: int, steps: int) -> dict[str, float]:
    """`mpirun -n ranks` workers with `threads` threads each; rank 0's figures."""
    mpirun = shutil.which("mpirun", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # fmt: skip
    if mpirun is None:
        sys.exit("benchmarks/ddp.py needs mpirun: pip install -e '.[mpi]'")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": str(threads)}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "core" if ranks > 1 else "none",
               sys.executable, __file__, "--worker", model, str(steps), str(out)]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{model} on {ranks} ranks failed:\n{done.stdout}{done.stderr}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=int,
        help="steps per run, the first untimed (default: transformer 200, dcgan 6)",
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        model, steps, out = args.worker
        return worker(model, int(steps), out)
    print(f"global batch {GLOBAL_BATCH}, c backend, {os.cpu_count()} cores; medians of the"
          " profiled steps (all but the first)")  # fmt: skip
    head = f"{'model':12s} {'ranks x threads':>15s} {'step ms':>9s} {'all-reduce ms':>14s}"
    print(head + f" {'share':>6s} {'calls':>6s} {'bytes/step':>11s} {'vs 1x1':>7s}")
    for model in args.models:
        base = None
        for ranks, threads in ((1, 1), (1, 2), (2, 1)):
            f = launch(model, ranks, threads, args.steps or STEPS[model])
            base = base or f["step_ms"]
            share = 100 * f["allreduce_ms"] / f["step_ms"]
            print(f"{model:12s} {f'{ranks} x {threads}':>15s} {f['step_ms']:9.2f}"
                  f" {f['allreduce_ms']:14.3f} {share:5.1f}% {f['allreduces']:6d}"
                  f" {f['bytes']:11,d} {base / f['step_ms']:6.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
