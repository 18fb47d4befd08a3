"""Values the host can compute while a program is recorded (gradfuse/frontend/eager.py):
a `Parameter` made from a tensor (PyTorch's "nn really" and polynomial tutorials),
`item()`, `tolist()`, `numpy()` and `f"{x:.4f}"` of what depends on constants and
parameters (after `execute()`, the trained values), and one error where a tensor
depends on a feeder or a loop body. And Adam on float64 parameters, in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradfuse
import gradfuse.nn as nn
import gradfuse.optim as optim
from gradfuse import Feeder, execute, ir_for
from gradfuse.diagnostics import GradfuseError


class Polynomial3(nn.Module):
    """"Learning PyTorch with examples"'s custom module, as written there."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(gradfuse.randn(()))
        self.b = nn.Parameter(gradfuse.randn(()))
        self.c = nn.Parameter(gradfuse.randn(()))
        self.d = nn.Parameter(gradfuse.randn(()))

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.a + self.b * x + self.c * x**2 + self.d * x**3

    def string(self) -> str:
        return f"y = {self.a.item()} + {self.b.item()} x + {self.c.item()} x^2 + {self.d.item()} x^3"


def test_the_polynomial_tutorial_trains_and_reports_as_written() -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    gradfuse.manual_seed(0)
    x = gradfuse.linspace(-math.pi, math.pi, 200)
    y = gradfuse.sin(x)
    model = Polynomial3()
    start = {k: v.copy() for k, v in model.state_dict().items()}
    criterion = nn.MSELoss(reduction="sum")
    optimizer = optim.SGD(model.parameters(), lr=1e-6)

    def step() -> None:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    ir_for(range(50), step)
    execute(backend="c")
    report = model.string()  # .item() of trained parameters
    tx = torch.linspace(-math.pi, math.pi, 200, dtype=torch.float64)
    ty = torch.sin(tx)
    coeffs = {k: torch.tensor(float(v), dtype=torch.float64, requires_grad=True) for k, v in start.items()}  # fmt: skip
    topt = torch.optim.SGD(coeffs.values(), lr=1e-6)
    for _ in range(50):
        a, b, c, d = coeffs.values()
        loss = ((a + b * tx + c * tx**2 + d * tx**3 - ty) ** 2).sum()
        topt.zero_grad()
        loss.backward()
        topt.step()
    got = [float(part.split()[0]) for part in report.removeprefix("y = ").split(" + ")]
    # float32 against float64 (2026-12-07, c): within 2.3e-7 relative after 50 steps of
    # sums over 200 points; the bound is 8x that
    np.testing.assert_allclose(got, [v.item() for v in coeffs.values()], rtol=2e-6)
    assert gradfuse.randn(()).shape == ()  # a fresh scalar as PyTorch's


def test_parameters_from_tensors_and_values_after_execute() -> None:
    gradfuse.reset()
    gradfuse.manual_seed(3)
    w = nn.Parameter(gradfuse.randn(784, 10) / math.sqrt(784))
    b = nn.Parameter(gradfuse.zeros(10))
    assert w.data.dtype == np.float32 and b.data.shape == (10,) and not b.data.any()
    assert abs(w.data.std() * 28 - 1) < 0.05  # 7,840 normal draws, scaled
    lin = nn.Linear(2, 1)
    lin.weight.data[...] = [[0.25, -1.5]]
    assert lin.weight.view(-1).tolist() == [0.25, -1.5]
    assert f"{lin.weight[0, 1]:.2f}" == "-1.50" and float(lin.weight.sum()) == -1.25
    np.testing.assert_array_equal((lin.weight * 2).numpy(), [[0.5, -3.0]])


def test_a_tensor_of_a_feeder_or_a_loop_body_has_no_value_yet() -> None:
    gradfuse.reset()
    x = Feeder(lambda: np.ones((1, 2), np.float32), shape=[1, 2], name="batch")
    with pytest.raises(GradfuseError, match='feeder "batch"\'s input.*Receiver'):
        x.sum().item()
    with pytest.raises(GradfuseError, match="ir_for body"):
        ir_for(range(2), lambda: nn.Parameter(gradfuse.ones(2) + x.sum()))
    with pytest.raises(GradfuseError, match="has 2 elements"):
        gradfuse.ones(2).item()


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_adam_trains_float64_parameters_in_float64(backend: str) -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    gradfuse.manual_seed(0)
    model = nn.Linear(3, 2).double()
    start = {k: v.copy() for k, v in model.state_dict().items()}
    opt = optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    xs = np.random.default_rng(0).normal(size=(3, 4, 3))
    batches = iter(xs)

    def step() -> None:
        x = Feeder(lambda: next(batches), shape=[4, 3], dtype=np.float64)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    ir_for(range(3), step)
    execute(backend=backend)
    tmodel = torch.nn.Linear(3, 2).double()
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    topt = torch.optim.AdamW(tmodel.parameters(), lr=0.1, weight_decay=0.1)
    for k in range(3):
        topt.zero_grad()
        tmodel(torch.tensor(xs[k])).pow(2).mean().backward()
        topt.step()
    for key, value in tmodel.state_dict().items():
        # float64 throughout (before, the bias corrections were float32: 7e-9 off);
        # 7.8e-16 here (2026-12-07)
        np.testing.assert_allclose(model.state_dict()[key], value.numpy(), rtol=0, atol=1e-13)
