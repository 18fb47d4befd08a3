"""examples/dcgan.py against the PyTorch DCGAN tutorial, at batch 2 with ngf = ndf = 4.

A PyTorch generator and discriminator (the tutorial's modules and init) are loaded
into the example's; both frameworks then compute the same forward outputs and, after
3 training steps on the same synthetic images and noise (Adam, BCELoss, the
tutorial's `fake.detach()`), the same losses (to 1e-4 of the largest) and
parameters and running statistics (to 1e-4 relative in norm; see `assert_norm_close`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
from example_programs import load_example  # tests/unit (conftest puts it on the path)

from gradfuse import Feeder, Receiver, execute

torch = pytest.importorskip("torch")
nn = torch.nn

SIZES = {"BATCH": 2, "NGF": 4, "NDF": 4}
STEPS = 3


def example() -> ModuleType:
    """examples/dcgan.py as a new module object with the small sizes (`main` not run)."""
    return load_example("dcgan", **SIZES)


def torch_models(ex: ModuleType) -> tuple[Any, Any]:
    """The tutorial's Generator and Discriminator (as `main` Sequentials) and init."""
    nz, ngf, ndf, nc = ex.NZ, ex.NGF, ex.NDF, ex.NC

    def up(i: int, o: int, *args: int) -> list[Any]:
        return [nn.ConvTranspose2d(i, o, 4, *args, bias=False), nn.BatchNorm2d(o), nn.ReLU()]

    def down(i: int, o: int) -> list[Any]:
        return [nn.Conv2d(i, o, 4, 2, 1, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.2)]

    g = nn.Module()
    g.main = nn.Sequential(
        *up(nz, ngf * 8, 1, 0), *up(ngf * 8, ngf * 4, 2, 1), *up(ngf * 4, ngf * 2, 2, 1),
        *up(ngf * 2, ngf, 2, 1), nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip
    d = nn.Module()
    d.main = nn.Sequential(
        nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2), *down(ndf, ndf * 2),
        *down(ndf * 2, ndf * 4), *down(ndf * 4, ndf * 8), nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
        nn.Sigmoid(),
    )  # fmt: skip
    torch.manual_seed(0)
    for model in (g, d):
        for m in model.modules():
            if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)
    return g, d


def torch_train(ex: ModuleType, g: Any, d: Any, data: Any) -> list[tuple[float, ...]]:
    """The tutorial's training loop for STEPS steps; the losses of each step."""
    opt_d = torch.optim.Adam(d.parameters(), lr=ex.LR, betas=ex.BETAS)
    opt_g = torch.optim.Adam(g.parameters(), lr=ex.LR, betas=ex.BETAS)
    criterion = nn.BCELoss()
    ones, zeros = torch.ones(ex.BATCH), torch.zeros(ex.BATCH)
    losses = []
    for _ in range(STEPS):
        d.zero_grad()
        output = d.main(torch.tensor(data.images())).view(-1)
        err_d_real = criterion(output, ones)
        err_d_real.backward()
        fake = g.main(torch.tensor(data.noise()))
        output_fake = d.main(fake.detach()).view(-1)
        err_d_fake = criterion(output_fake, zeros)
        err_d_fake.backward()
        opt_d.step()
        g.zero_grad()
        output_g = d.main(fake).view(-1)
        err_g = criterion(output_g, ones)
        err_g.backward()
        opt_g.step()
        values = (
            err_d_real + err_d_fake,
            err_g,
            output.mean(),
            output_fake.mean(),
            output_g.mean(),
        )
        losses.append(tuple(float(v.detach()) for v in values))
    return losses


def assert_norm_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """`|got - want| <= rtol |want|` in the Frobenius norm.

    Adam moves every weight by about lr at first, whatever the size of its gradient,
    so a weight whose gradient is rounding noise (one in 51200 of `G main.0.weight`
    here, |g| ~ 3e-9) moves by a noise-decided amount in either framework; the norm
    of the whole tensor still agrees to 1e-5.
    """
    diff = float(np.linalg.norm(np.asarray(got, np.float64) - want))
    err = diff / max(float(np.linalg.norm(want)), 1e-30)
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol}"


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """Elementwise within `rtol` of the largest magnitude of `want`."""
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(np.asarray(got, np.float64) - want).max()) / scale
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol}"


def test_state_dict_names_are_the_tutorials() -> None:
    ex = example()
    tg, td = torch_models(ex)
    g, d = ex.Generator(), ex.Discriminator()
    for ours, theirs in ((g, tg), (d, td)):
        state, want = ours.state_dict(), theirs.state_dict()
        assert list(state) == list(want)
        assert all(state[k].shape == tuple(v.shape) for k, v in want.items())
    assert "main.1.running_var" in g.state_dict() and "main.3.num_batches_tracked" in d.state_dict()


def loaded(ex: ModuleType) -> tuple[Any, Any, Any, Any]:
    """PyTorch's generator and discriminator, and the example's with their state."""
    tg, td = torch_models(ex)
    g, d = ex.Generator(), ex.Discriminator()
    g.load_state_dict(tg.state_dict())
    d.load_state_dict(td.state_dict())
    return tg, td, g, d


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_dcgan_forward_matches_pytorch(backend: str) -> None:
    ex = example()
    tg, td, g, d = loaded(ex)
    rng = np.random.default_rng(5)
    noise = rng.normal(size=(ex.BATCH, ex.NZ, 1, 1)).astype(np.float32)
    images = np.tanh(rng.normal(size=(ex.BATCH, ex.NC, 64, 64))).astype(np.float32)
    outputs: list[np.ndarray] = []
    fed_noise = Feeder(lambda: noise, shape=noise.shape, name="noise")
    fed_images = Feeder(lambda: images, shape=images.shape, name="images")
    Receiver(lambda *v: outputs.extend(v), [g(fed_noise), d(fed_images)])
    execute(backend=backend)
    assert_close(outputs[0], tg.main(torch.tensor(noise)).detach().numpy(), 1e-5, "G(z)")
    want_d = td.main(torch.tensor(images)).view(-1).detach().numpy()
    assert_close(outputs[1], want_d, 1e-5, "D(x)")


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_dcgan_training_matches_pytorch(backend: str) -> None:
    ex = example()
    tg, td, g, d = loaded(ex)
    _, _, losses = ex.record(STEPS, 1, models=(g, d), data=ex.Data(seed=3))
    execute(backend=backend)
    want_losses = torch_train(ex, tg, td, ex.Data(seed=3))
    assert_close(np.array(losses), np.array(want_losses), 1e-4, "losses")
    for name, ours, theirs in (("G", g, tg), ("D", d, td)):
        state = ours.state_dict()
        for k, v in theirs.state_dict().items():
            assert_norm_close(state[k], v.numpy().astype(np.float64), 1e-4, f"{name} {k}")
