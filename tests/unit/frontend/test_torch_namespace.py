"""torch's creation functions, its functions that are tensor methods, its dtype names
and `nn.init` (gradfuse/frontend/creation.py, torch_functions.py, nn/init.py), against
PyTorch; and PyTorch's VAE example as its `main.py` writes it, with `torch` replaced by
`gradfuse`."""

from __future__ import annotations

import math
from typing import Any

import gradfuse.nn.functional as F
import numpy as np
import pytest

import gradfuse
import gradfuse as torch_like
import gradfuse.nn as nn
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError


def received(tensors: list[Any], backend: str = "reference") -> list[np.ndarray]:
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), tensors)
    execute(backend=backend)
    return got


def test_creation_functions_give_pytorchs_values() -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    g, t = gradfuse, torch
    made = [
        lambda m: m.zeros(2, 3), lambda m: m.ones((2, 3)), lambda m: m.full((2,), 1.5),
        lambda m: m.arange(5), lambda m: m.arange(1, 4, 0.5), lambda m: m.linspace(-1, 1, 5),
        lambda m: m.eye(3), lambda m: m.eye(2, 3), lambda m: m.tensor([[1, 2], [3, 4]]),
        lambda m: m.triu(m.ones(4, 4), diagonal=1), lambda m: m.tril(m.ones(3, 4)),
        lambda m: m.zeros_like(m.ones(2)), lambda m: m.full_like(m.ones(2), 7.0),
        lambda m: m.empty(3, 1, dtype=m.long).fill_(4),
        lambda m: m.arange(0, 6, 2, dtype=m.float) * m.exp(m.tensor(0.5)),
    ]  # fmt: skip
    got = received([make(g) for make in made])
    for k, (value, make) in enumerate(zip(got, made, strict=True)):
        want = make(t).double().numpy()
        assert value.shape == want.shape, k
        np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=str(k))
    assert gradfuse.arange(3).dtype == np.float32  # integers held in float32
    assert gradfuse.zeros(2, dtype=gradfuse.float64).dtype == np.float64


def test_triu_keeps_minus_infinity_and_zeros_the_rest() -> None:
    gradfuse.reset()
    mask = gradfuse.full((3, 3), float("-inf"))
    got = received([gradfuse.triu(mask, diagonal=1)])[0]
    np.testing.assert_array_equal(got, np.triu(np.full((3, 3), -np.inf), 1) + 0.0 * np.tril(np.ones((3, 3))))  # fmt: skip


def test_requires_grad_makes_a_trainable_leaf() -> None:
    gradfuse.reset()
    gradfuse.manual_seed(0)
    w = gradfuse.randn(4, 3, requires_grad=True)
    b = gradfuse.zeros(3, requires_grad=True)
    assert isinstance(w, gradfuse.Parameter) and w.requires_grad
    x = gradfuse.constant(np.ones((2, 4), np.float32))
    ((x @ w + b) ** 2).sum().backward()
    got = received([b.grad])[0]
    np.testing.assert_allclose(got, 2 * 2 * w.data.sum(0), rtol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_randn_is_standard_normal_and_new_every_iteration(backend: str) -> None:
    gradfuse.reset()
    gradfuse.manual_seed(0)
    draws: list[np.ndarray] = []
    ir_for(range(2), lambda: Receiver(lambda v: draws.append(v), gradfuse.randn(200, 100)))
    execute(backend=backend)
    a, b = draws
    # 20,000 draws: the mean within 5 standard errors (5 / sqrt(20000) = 0.035) of 0, the
    # variance within 5 of its standard errors (5 * sqrt(2 / 20000) = 0.05) of 1
    for d in (a, b):
        assert abs(d.mean()) < 0.035 and abs(d.var() - 1) < 0.05
        assert np.isfinite(d).all()
        assert 0.2945 < (np.abs(d) < 0.4).mean() < 0.3271  # P(|z| < 0.4) = 0.3108 +- 5 SE
    assert not np.array_equal(a, b)


def test_functions_are_their_methods() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    a, b = rng.uniform(0.5, 2, size=(2, 3, 4)), rng.uniform(0.5, 2, size=(2, 4, 3))
    gradfuse.reset()
    calls = [
        ("exp", (a,), {}), ("log", (a,), {}), ("sin", (a,), {}), ("cos", (a,), {}),
        ("tanh", (a,), {}), ("sigmoid", (a,), {}), ("sqrt", (a,), {}), ("abs", (-a,), {}),
        ("sum", (a,), {"dim": 1}), ("mean", (a,), {}), ("bmm", (a, b), {}),
        ("matmul", (a, b), {}), ("pow", (a, 3), {}), ("softmax", (a,), {"dim": -1}),
        ("log_softmax", (a,), {"dim": 1}), ("transpose", (a, 0, 2), {}),
        ("reshape", (a, (4, 6)), {}), ("maximum", (a, 1 / a), {}), ("minimum", (a, 1 / a), {}),
        ("rsqrt", (a,), {}), ("square", (a,), {}), ("neg", (a,), {}), ("var", (a,), {}),
    ]  # fmt: skip
    as_g = [gradfuse.tensor(v, dtype=gradfuse.float64) if isinstance(v, np.ndarray) else v for _, args, _ in calls for v in args]  # fmt: skip
    outs, k = [], 0
    for name, args, kwargs in calls:
        outs.append(getattr(gradfuse, name)(*as_g[k : k + len(args)], **kwargs))
        k += len(args)
    got = received(outs)
    for value, (name, args, kwargs) in zip(got, calls, strict=True):
        targs = [torch.tensor(v) if isinstance(v, np.ndarray) else v for v in args]
        want = getattr(torch, name)(*targs, **kwargs).numpy()
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12, err_msg=name)
    with pytest.raises(GradfuseError, match=r"exp\(\): expected a Tensor"):
        gradfuse.exp(1.0)


def test_nn_init_draws_pytorchs_distributions() -> None:
    gradfuse.manual_seed(0)
    conv = nn.Conv2d(32, 64, 3)  # fan_in 288, fan_out 576
    fan_in, fan_out = 32 * 9, 64 * 9
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    assert conv.weight.data.std() == pytest.approx(math.sqrt(2 / fan_out), rel=0.02)
    nn.init.xavier_uniform_(conv.weight, gain=nn.init.calculate_gain("tanh"))
    bound = 5 / 3 * math.sqrt(6 / (fan_in + fan_out))
    assert np.abs(conv.weight.data).max() <= bound
    assert np.abs(conv.weight.data).max() > 0.99 * bound
    nn.init.uniform_(conv.weight, -0.1, 0.1)
    assert conv.weight.data.min() >= -0.1 and conv.weight.data.max() < 0.1
    nn.init.zeros_(conv.bias)
    assert not conv.bias.data.any() and conv.bias.data.dtype == np.float32
    nn.init.trunc_normal_(conv.weight, std=1.0, a=-0.5, b=0.5)
    assert np.abs(conv.weight.data).max() <= 0.5
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(GradfuseError, match="expected a Parameter"):
        nn.init.zeros_(gradfuse.zeros(3))


class VAE(nn.Module):
    """PyTorch's examples/vae/main.py, as written there (784 -> 400 -> 20)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):  # noqa: ANN001, ANN201
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):  # noqa: ANN001, ANN201
        std = torch_like.exp(0.5 * logvar)
        eps = torch_like.randn_like(std)
        return mu + eps * std

    def decode(self, z):  # noqa: ANN001, ANN201
        h3 = F.relu(self.fc3(z))
        return torch_like.sigmoid(self.fc4(h3))

    def forward(self, x):  # noqa: ANN001, ANN201
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):  # noqa: ANN001, ANN201
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")  # noqa: N806
    KLD = -0.5 * torch_like.sum(1 + logvar - mu.pow(2) - logvar.exp())  # noqa: N806
    return BCE + KLD


def test_the_vae_example_trains_as_pytorch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    images = np.random.default_rng(8).uniform(size=(3, 4, 1, 28, 28)).astype(np.float32)
    gradfuse.reset()
    gradfuse.manual_seed(2)
    model = VAE()
    start = {k: v.copy() for k, v in model.state_dict().items()}
    optimizer = gradfuse.optim.Adam(model.parameters(), lr=1e-3)
    drawn: list[Any] = []
    real_randn_like = gradfuse.randn_like
    monkeypatch.setattr(gradfuse, "randn_like", lambda x: drawn.append(real_randn_like(x)) or drawn[-1])  # fmt: skip
    batches, losses, eps = iter(images), [], []

    def step() -> None:
        data = Feeder(lambda: next(batches), shape=[4, 1, 28, 28])
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        optimizer.step()
        Receiver(lambda v, e: (losses.append(float(v)), eps.append(e)), [loss, drawn[-1]])

    ir_for(range(3), step)
    execute(backend="c")
    tmodel = torch.nn.Module()
    for name in ("fc1", "fc21", "fc22", "fc3", "fc4"):
        layer = getattr(model, name)
        setattr(tmodel, name, torch.nn.Linear(layer.in_features, layer.out_features).double())
    tmodel.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in start.items()})
    topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3)
    want = []
    for k in range(3):
        x = torch.tensor(images[k], dtype=torch.float64).view(-1, 784)
        topt.zero_grad()
        h1 = torch.relu(tmodel.fc1(x))
        mu, logvar = tmodel.fc21(h1), tmodel.fc22(h1)
        z = mu + torch.tensor(eps[k], dtype=torch.float64) * torch.exp(0.5 * logvar)
        recon = torch.sigmoid(tmodel.fc4(torch.relu(tmodel.fc3(z))))
        bce = torch.nn.functional.binary_cross_entropy(recon, x, reduction="sum")
        loss = bce - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss.backward()
        topt.step()
        want.append(loss.item())
    # float32 against float64 (2026-12-07, c, AVX2 with FMA): losses of ~2,200, sums of
    # 12,544 terms, within 5.4e-7 relative. Another CPU sums in another order: float32's
    # random-walk error over those terms is ~sqrt(12544) * 6e-8 = 6.7e-6 at most in
    # practice; the bound, 10x the measured, stays under it
    np.testing.assert_allclose(losses, want, rtol=5e-6)


def test_module_utilities_as_pytorch_code_uses_them() -> None:
    gradfuse.reset()
    gradfuse.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(True), nn.Flatten(), nn.Linear(8, 1))

    def weights_init(m: nn.Module) -> None:  # PyTorch's DCGAN example, as written
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            nn.init.normal_(m.weight.data, 0.0, 0.02)
            nn.init.constant_(m.bias.data, 0)

    model.apply(weights_init)
    assert abs(model[0].weight.data.std() - 0.02) < 0.02 and not model[0].bias.data.any()
    assert next(model.parameters()) is model[0].weight
    device = gradfuse.device("cuda" if gradfuse.cuda.is_available() else "cpu")
    assert model.to(device) is model and str(device) in ("cuda", "cpu")
    model[0].requires_grad_(False)  # frozen: no .grad, the optimizer leaves it
    frozen = model[0].weight.data.copy()
    opt = gradfuse.optim.SGD(model.parameters(), lr=0.1)
    x = gradfuse.constant(np.ones((1, 1, 4, 4), np.float32))
    model(x).sum().backward()
    assert model[0].weight.grad is None and model[3].weight.grad is not None
    opt.step()
    gradfuse.execute(backend="reference")
    np.testing.assert_array_equal(model[0].weight.data, frozen)
    model.double()
    assert model[3].weight.dtype == np.float64


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_floor_ceil_trunc_and_long_are_numpys(backend: str, dtype: Any) -> None:
    rng = np.random.default_rng(9)
    big = 2.0**23 if dtype == np.float32 else 2.0**52
    values = np.concatenate([
        rng.uniform(-50, 50, 200), np.arange(-4.5, 5.0, 0.5), [0.0, -0.0, 0.49999997, -0.49999997],
        [big - 1.5, big - 0.5, big, big + 2, -big + 0.5, -big - 2, 3e30 if dtype == np.float32 else 3e300],
    ]).astype(dtype)  # fmt: skip
    gradfuse.reset()
    p = gradfuse.Parameter(values.copy(), name="p")
    outs = [p.round(), p.floor(), p.ceil(), p.trunc(), p.long(), gradfuse.round(p, decimals=1),
            p.to(gradfuse.long), p.type(gradfuse.int64)]  # fmt: skip
    (sum(o.sum() for o in outs) + p.sum()).backward()
    got = received([*outs, p.grad], backend)
    want = [np.round(values), np.floor(values), np.ceil(values), np.trunc(values),
            np.trunc(values), np.round(values * 10) / 10, np.trunc(values), np.trunc(values)]  # fmt: skip
    for k, (g, w) in enumerate(zip(got, want)):
        if k == 5:  # x * 10 rounds in float32 before it is rounded (as PyTorch's)
            np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=str(k))
        else:
            np.testing.assert_array_equal(g, w, err_msg=str(k))
    np.testing.assert_array_equal(got[-1], np.ones_like(values))  # theirs is 0, as PyTorch's
