"""A training run for tests/unit/test_distributed.py, launched by it under `mpirun -n 2`
(`ddp`) or alone (`single`): the same steps on the same data, a global batch of 8 split
between the ranks, the final params saved per rank.

    mpirun -n 2 python tests/unit/ddp_train.py mlp c ddp OUT   # OUT/ddp_0.npz, OUT/ddp_1.npz
    python tests/unit/ddp_train.py mlp c single OUT            # OUT/single_0.npz

`dcgan` is examples/dcgan.py's step (small channels, 64x64 images) with its batch norms
made `SyncBatchNorm`, as a PyTorch DDP script converts them, so that the two ranks'
4 + 4 samples normalise as the one process's 8.

`accum` runs each rank's samples as two micro-batches of 2, the first's backward inside
`no_sync()` (gradient accumulation). `fail` and `kill` runs end rank 1 before its first
all-reduce (an exception in a feeder, or SIGKILL): the job must stop, not hang.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
from example_programs import load_example

import gradfuse
import gradfuse.distributed as dist
from gradfuse import Feeder, ir_for
from gradfuse.nn import (
    SGD,
    BatchNorm1d,
    BCELoss,
    Linear,
    Module,
    MSELoss,
    Sequential,
    Sigmoid,
    SyncBatchNorm,
    TransformerEncoderLayer,
)

STEPS, BATCH = 3, 8
GAN_STEPS = 2  # see test_distributed.py: the DCGAN comparison


def model_and_data(name: str) -> tuple[gradfuse.nn.Module, np.ndarray, np.ndarray]:
    """The model and `STEPS` global batches of inputs and targets."""
    rng = np.random.default_rng(0)
    gradfuse.manual_seed(1)
    if name == "mlp":
        model = Sequential(Linear(16, 32), Sigmoid(), Linear(32, 4))
        shape, out = (16,), (4,)
    elif name == "bn":  # buffers: a batch norm's running statistics (ddp_torch.py too)
        model = Sequential(Linear(16, 32), BatchNorm1d(32), Sigmoid(), Linear(32, 4))
        shape, out = (16,), (4,)
    else:
        model = TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        shape, out = (5, 16), (5, 16)
    x = rng.standard_normal((STEPS, BATCH, *shape)).astype(np.float32)
    y = rng.standard_normal((STEPS, BATCH, *out)).astype(np.float32)
    return model, x, y


def dcgan(backend: str, mode: str, out: str) -> None:
    """examples/dcgan.py's training step (discriminator on real and fake images, then the
    generator) for `GAN_STEPS` steps, each rank on its part of the same global batches.
    SGD with momentum in place of the tutorial's Adam: Adam's first moves are
    `lr g / (|g| + eps)`, which float32 rounding decides where |g| is near eps (see
    test_dcgan.py's ADAM_RESOLVES), in one process as much as in two."""
    ex = load_example("dcgan", NGF=4, NDF=4, NZ=16, BATCH=BATCH)
    gradfuse.manual_seed(0)
    net_g, net_d = ex.Generator(), ex.Discriminator()
    ex.weights_init(net_g, seed=0)
    ex.weights_init(net_d, seed=1)
    rank, per = 0, BATCH
    if mode != "single":
        dist.init_process_group()
        rank, per = dist.get_rank(), BATCH // dist.get_world_size()
        net_g, net_d = (
            dist.DistributedDataParallel(SyncBatchNorm.convert_sync_batchnorm(m))
            for m in (net_g, net_d)
        )
    mine = slice(rank * per, (rank + 1) * per)
    data = ex.Data(seed=9)  # no ReLU input near 0 (test_distributed.py)
    opt_d = SGD(net_d.parameters(), lr=0.02, momentum=0.9)
    opt_g = SGD(net_g.parameters(), lr=0.02, momentum=0.9)
    criterion = BCELoss()
    real, fake_label = (gradfuse.constant(np.full(per, v, np.float32)) for v in (1.0, 0.0))

    def step() -> None:
        opt_d.zero_grad()
        images = Feeder(lambda: data.images()[mine], shape=[per, ex.NC, 64, 64], name="images")
        criterion(net_d(images), real).backward()
        fake = net_g(Feeder(lambda: data.noise()[mine], shape=[per, ex.NZ, 1, 1], name="noise"))
        criterion(net_d(fake.detach()), fake_label).backward()
        opt_d.step()
        opt_g.zero_grad()
        criterion(net_d(fake), real).backward()
        opt_g.step()

    ir_for(range(GAN_STEPS), step)
    gradfuse.execute(backend=backend)
    save(out, mode, rank, {"g": net_g, "d": net_d})


def save(out: str, mode: str, rank: int, models: dict[str, Module]) -> None:
    """The models' state (without DDP's `module.` prefix) in OUT/<mode>_<rank>.npz."""
    state = {
        f"{name}.{key.removeprefix('module.')}": value
        for name, model in models.items()
        for key, value in model.state_dict().items()
    }
    np.savez(os.path.join(out, f"{mode}_{rank}.npz"), **state)


def main(name: str, backend: str, mode: str, out: str) -> None:
    if name == "dcgan":
        return dcgan(backend, mode, out)
    model, x, y = model_and_data(name)
    if name == "bn":  # the initial state, for PyTorch's DDP (ddp_torch.py)
        np.savez(os.path.join(out, "init.npz"), **model.state_dict())
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
        if mode != "accum":
            loss_fn(model(inputs), targets).backward()
        else:  # two micro-batches, the first's gradients kept local (`no_sync`)
            half = inputs.shape[0] // 2
            with model.no_sync():
                (loss_fn(model(inputs[:half]), targets[:half]) * 0.5).backward()
            (loss_fn(model(inputs[half:]), targets[half:]) * 0.5).backward()
        opt.step()

    ir_for(range(STEPS), step)
    gradfuse.execute(backend=backend)
    save(out, mode, rank, {"model": model})


if __name__ == "__main__":
    main(*sys.argv[1:5])
