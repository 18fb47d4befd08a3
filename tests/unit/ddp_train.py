"""A training run for tests/unit/test_distributed.py, launched by it under `mpirun -n 2`
(`ddp`) or alone (`single`): the same steps on the same data, a global batch of 8 split
between the ranks, the final params saved per rank.

    mpirun -n 2 python tests/unit/ddp_train.py mlp c ddp OUT   # OUT/ddp_0.npz, OUT/ddp_1.npz
    python tests/unit/ddp_train.py mlp c single OUT            # OUT/single_0.npz

`fail` and `kill` runs end rank 1 before its first all-reduce (an exception in a feeder,
or SIGKILL): the job must stop, not hang.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

import gradfuse
import gradfuse.distributed as dist
from gradfuse import Feeder, ir_for
from gradfuse.nn import SGD, Linear, MSELoss, Sequential, Sigmoid, TransformerEncoderLayer

STEPS, BATCH = 3, 8


def model_and_data(name: str) -> tuple[gradfuse.nn.Module, np.ndarray, np.ndarray]:
    """The model and `STEPS` global batches of inputs and targets."""
    rng = np.random.default_rng(0)
    gradfuse.manual_seed(1)
    if name == "mlp":
        model = Sequential(Linear(16, 32), Sigmoid(), Linear(32, 4))
        shape, out = (16,), (4,)
    else:
        model = TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        shape, out = (5, 16), (5, 16)
    x = rng.standard_normal((STEPS, BATCH, *shape)).astype(np.float32)
    y = rng.standard_normal((STEPS, BATCH, *out)).astype(np.float32)
    return model, x, y


def main(name: str, backend: str, mode: str, out: str) -> None:
    model, x, y = model_and_data(name)
    rank = 0
    if mode != "single":
        dist.init_process_group()
        rank, size = dist.get_rank(), dist.get_world_size()
        model = dist.DistributedDataParallel(model)
        per = BATCH // size
        x, y = x[:, rank * per : (rank + 1) * per], y[:, rank * per : (rank + 1) * per]
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = MSELoss()
    xs, ys = iter(x), iter(y)

    def next_x() -> np.ndarray:
        if rank == 1 and mode == "fail":
            raise RuntimeError("rank 1's data loader broke")
        if rank == 1 and mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return next(xs)

    def step() -> None:
        opt.zero_grad()
        inputs = Feeder(next_x, shape=list(x.shape[1:]), name="x")
        targets = Feeder(lambda: next(ys), shape=list(y.shape[1:]), name="y")
        loss_fn(model(inputs), targets).backward()
        opt.step()

    ir_for(range(STEPS), step)
    gradfuse.execute(backend=backend)
    state = {k.removeprefix("module."): v for k, v in model.state_dict().items()}
    np.savez(os.path.join(out, f"{mode}_{rank}.npz"), **state)


if __name__ == "__main__":
    main(*sys.argv[1:5])
