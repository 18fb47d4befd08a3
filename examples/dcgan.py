"""DCGAN as in the PyTorch DCGAN tutorial (and the kernel profile in shared/reference),
trained whole in `ir_for`: nc=1, nz=100, ngf=ndf=64, 64x64 images, BCELoss, Adam
(lr 2e-4, betas (0.5, 0.999)), the tutorial's weight init.

One step is the tutorial's: the discriminator on real images (a feeder; synthetic
blobs here) and on detached fakes that the generator makes from noise (a feeder),
one Adam step of the discriminator, then the generator's step through the updated
discriminator. A receiver reports the losses every LOG_EVERY steps:

    python examples/dcgan.py                 # default backend
    GRADFUSE_BACKEND=reference python examples/dcgan.py
    python examples/dcgan.py --profile       # the kernel table of one step
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gradfuse
from gradfuse import Feeder, Receiver, Tensor, ir_for
from gradfuse.nn import (
    Adam,
    BatchNorm2d,
    BCELoss,
    Conv2d,
    ConvTranspose2d,
    LeakyReLU,
    Module,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from gradfuse.profiler import profile, schedule

NC, NZ, NGF, NDF, IMAGE = 1, 100, 64, 64, 64
BATCH, STEPS, LOG_EVERY = 8, 10, 2
LR, BETAS = 2e-4, (0.5, 0.999)

Losses = tuple[float, float, float, float, float]  # errD, errG, D(x), D(G(z)) before/after


class Generator(Module):
    """Noise [N, nz, 1, 1] -> images [N, nc, 64, 64] in [-1, 1] (`main.0` ... `main.13`)."""

    def __init__(self, nz: int | None = None, ngf: int | None = None, nc: int | None = None):
        super().__init__()
        nz, ngf, nc = nz or NZ, ngf or NGF, nc or NC
        self.main = Sequential(
            ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), BatchNorm2d(ngf * 8), ReLU(),
            ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), BatchNorm2d(ngf * 4), ReLU(),
            ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), BatchNorm2d(ngf * 2), ReLU(),
            ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), BatchNorm2d(ngf), ReLU(),
            ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), Tanh(),
        )  # fmt: skip

    def forward(self, z: Tensor) -> Tensor:
        return self.main(z)


class Discriminator(Module):
    """Images [N, nc, 64, 64] -> the probability [N] that each is real (`main.0` ... `main.12`)."""

    def __init__(self, ndf: int | None = None, nc: int | None = None):
        super().__init__()
        ndf, nc = ndf or NDF, nc or NC
        self.main = Sequential(
            Conv2d(nc, ndf, 4, 2, 1, bias=False), LeakyReLU(0.2),
            Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), BatchNorm2d(ndf * 2), LeakyReLU(0.2),
            Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), BatchNorm2d(ndf * 4), LeakyReLU(0.2),
            Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), BatchNorm2d(ndf * 8), LeakyReLU(0.2),
            Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), Sigmoid(),
        )  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return self.main(x).reshape(-1)


def weights_init(model: Module, seed: int = 0) -> None:
    """The tutorial's init: conv weights N(0, 0.02), batch-norm weights N(1, 0.02), biases 0."""
    rng = np.random.default_rng(seed)
    for _, m in model.named_modules():
        if isinstance(m, Conv2d | ConvTranspose2d):
            m.weight.data = rng.normal(0.0, 0.02, m.weight.shape).astype(np.float32)
        elif isinstance(m, BatchNorm2d) and m.weight is not None and m.bias is not None:
            m.weight.data = rng.normal(1.0, 0.02, m.weight.shape).astype(np.float32)
            m.bias.data = np.zeros(m.bias.shape, np.float32)


class Data:
    """Synthetic real images (soft blobs in [-1, 1]) and generator noise, each from its own
    seeded generator, so another framework can draw the same batches in the same order."""

    def __init__(self, seed: int = 1) -> None:
        self.image_rng = np.random.default_rng(seed)
        self.noise_rng = np.random.default_rng(seed + 1)
        grid = np.linspace(-1.0, 1.0, IMAGE, dtype=np.float32)
        self.yy, self.xx = np.meshgrid(grid, grid, indexing="ij")

    def images(self) -> np.ndarray:
        centres = self.image_rng.uniform(-0.5, 0.5, (BATCH, NC, 2, 1, 1)).astype(np.float32)
        d2 = (self.yy - centres[:, :, 0]) ** 2 + (self.xx - centres[:, :, 1]) ** 2
        return (2.0 * np.exp(-8.0 * d2) - 1.0).astype(np.float32)

    def noise(self) -> np.ndarray:
        return self.noise_rng.standard_normal((BATCH, NZ, 1, 1)).astype(np.float32)


def record(
    steps: int = STEPS,
    log_every: int = LOG_EVERY,
    models: tuple[Generator, Discriminator] | None = None,
    data: Data | None = None,
) -> tuple[Generator, Discriminator, list[Losses]]:
    """Records `steps` DCGAN steps (new models with the tutorial's init unless `models`);
    the models and the list that the loss receiver fills every `log_every` steps."""
    if models is None:
        gradfuse.manual_seed(0)
        models = (Generator(), Discriminator())
        weights_init(models[0], seed=0)
        weights_init(models[1], seed=1)
    net_g, net_d = models
    data = data or Data()
    opt_d = Adam(net_d.parameters(), lr=LR, betas=BETAS)
    opt_g = Adam(net_g.parameters(), lr=LR, betas=BETAS)
    criterion = BCELoss()
    real_label = gradfuse.constant(np.ones(BATCH, np.float32))
    fake_label = gradfuse.constant(np.zeros(BATCH, np.float32))
    losses: list[Losses] = []

    def train_step() -> list[Tensor]:
        # (1) the discriminator: maximise log(D(x)) + log(1 - D(G(z)))
        opt_d.zero_grad()
        output = net_d(Feeder(data.images, shape=[BATCH, NC, IMAGE, IMAGE], name="images"))
        err_d_real = criterion(output, real_label)
        err_d_real.backward()
        fake = net_g(Feeder(data.noise, shape=[BATCH, NZ, 1, 1], name="noise"))
        output_fake = net_d(fake.detach())
        err_d_fake = criterion(output_fake, fake_label)
        err_d_fake.backward()
        opt_d.step()
        # (2) the generator: maximise log(D(G(z))) through the updated discriminator
        opt_g.zero_grad()
        output_g = net_d(fake)
        err_g = criterion(output_g, real_label)
        err_g.backward()
        opt_g.step()
        return [err_d_real + err_d_fake, err_g, output.mean(), output_fake.mean(), output_g.mean()]

    def report(*values: np.ndarray) -> None:
        err_d, err_g, d_x, d_g_z1, d_g_z2 = (float(v) for v in values)
        losses.append((err_d, err_g, d_x, d_g_z1, d_g_z2))
        print(
            f"step {len(losses) * log_every:4d}  Loss_D {err_d:.4f}  Loss_G {err_g:.4f}"
            f"  D(x) {d_x:.4f}  D(G(z)) {d_g_z1:.4f} / {d_g_z2:.4f}",
            flush=True,
        )

    def block() -> None:
        if log_every > 1:
            ir_for(range(log_every - 1), train_step)
        Receiver(report, train_step(), name="losses")

    ir_for(range(steps // log_every), block)
    return net_g, net_d, losses


def train(
    steps: int = STEPS, log_every: int = LOG_EVERY, backend: str | None = None
) -> tuple[Generator, Discriminator, list[Losses]]:
    """Trains new models for `steps` steps on `backend`; the models and the received losses."""
    net_g, net_d, losses = record(steps, log_every)
    start = time.perf_counter()
    program = gradfuse.compile(backend)
    compiled = time.perf_counter()
    program.run()
    done = time.perf_counter()
    print(
        f"{steps} steps of batch {BATCH} on the {program.backend} backend:"
        f" compile {compiled - start:.1f} s, run {done - compiled:.1f} s"
        f" ({(done - compiled) / steps * 1e3:.0f} ms a step,"
        f" {program.kernels_per_iteration} kernels per step)"
    )
    return net_g, net_d, losses


def profile_steps(steps: int = 5, backend: str | None = None, trace: str | None = None) -> profile:
    """Profiles the training step: a 5-step run with one step per iteration of the
    outer `ir_for` (log_every=1), steps 2 to 4 recorded; prints PyProf's kernel table of
    step 2, the time per layer and the step overview; `trace`: a Chrome trace file."""
    record(steps, log_every=1)
    with profile(schedule=schedule(wait=1, warmup=1, active=3), with_flops=True) as prof:
        gradfuse.compile(backend).run()
    print(prof.summary())
    if trace:
        prof.export_chrome_trace(trace)
        print(f"trace: {trace} (open it in https://ui.perfetto.dev or TensorBoard)")
    return prof


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--profile", action="store_true", help="profile the training step")
    args.add_argument("--trace", help="with --profile: write a Chrome trace here")
    opts = args.parse_args()
    if opts.profile:
        profile_steps(trace=opts.trace)
        return
    train()


if __name__ == "__main__":
    main()
