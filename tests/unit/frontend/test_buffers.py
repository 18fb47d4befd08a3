"""Buffers are not parameters, as in PyTorch: `parameters()` lists what is trained,
`buffers()` the rest (BatchNorm's running statistics, `register_buffer`), and
`state_dict()` / `load_state_dict()` cover both in PyTorch's key order."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from gradfuse import Feeder, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import (
    SGD,
    BatchNorm1d,
    BatchNorm2d,
    Buffer,
    Conv2d,
    Linear,
    Module,
    MSELoss,
    Parameter,
    ReLU,
    Sequential,
)

torch = pytest.importorskip("torch")


def conv_bn() -> tuple[Sequential, object]:
    """A small conv + BN model in both frameworks, with PyTorch's state loaded."""
    tn = torch.nn
    tmodel = tn.Sequential(
        tn.Conv2d(2, 3, 3, padding=1), tn.BatchNorm2d(3), tn.ReLU(),
        tn.Conv2d(3, 3, 3, bias=False), tn.BatchNorm2d(3),
    )  # fmt: skip
    model = Sequential(
        Conv2d(2, 3, 3, padding=1), BatchNorm2d(3), ReLU(), Conv2d(3, 3, 3, bias=False),
        BatchNorm2d(3),
    )  # fmt: skip
    model.load_state_dict(tmodel.state_dict())
    return model, tmodel


def test_parameters_and_buffers_are_pytorchs() -> None:
    model, tmodel = conv_bn()
    assert len(list(model.parameters())) == len(list(tmodel.parameters())) == 7
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in tmodel.named_buffers()]
    assert len(model.buffers()) == 6 and all(isinstance(b, Buffer) for b in model.buffers())
    assert list(model.state_dict()) == list(tmodel.state_dict())
    bn = model[1]
    assert [n for n, _ in bn.named_parameters(prefix="1")] == ["1.weight", "1.bias"]
    assert model.parameters(recurse=False) == [] and model.buffers(recurse=False) == []


def test_training_updates_running_stats_with_an_optimizer_over_parameters() -> None:
    """SGD over `parameters()` trains the weights; BatchNorm still updates its running
    statistics, and `state_dict()` after `execute()` holds PyTorch's values for both."""
    model, tmodel = conv_bn()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 2, 5, 5)).astype(np.float32)
    t = rng.normal(size=(2, 3, 3, 3)).astype(np.float32)
    opt = SGD(model.parameters(), lr=0.1)
    assert not any(isinstance(p, Buffer) for p in opt.parameters())

    def step() -> None:
        opt.zero_grad()
        out = model(Feeder(lambda: x, shape=x.shape, name="x"))
        MSELoss()(out, Feeder(lambda: t, shape=t.shape, name="t")).backward()
        opt.step()

    ir_for(range(2), step)
    execute(backend="reference")
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.1)
    for _ in range(2):
        topt.zero_grad()
        torch.nn.functional.mse_loss(tmodel(torch.tensor(x)), torch.tensor(t)).backward()
        topt.step()
    want = tmodel.state_dict()
    state = model.state_dict()
    assert list(state) == list(want)
    for k, v in want.items():  # float32 vs float32 after 2 steps: 1e-5 holds with margin
        np.testing.assert_allclose(state[k], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    assert float(state["1.num_batches_tracked"]) == 2.0


class WithBuffers(Module):
    """A buffer registered before a parameter, one not persistent, one left None."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", np.full(3, 2.0, np.float32))
        self.register_buffer("cache", np.zeros(3, np.float32), persistent=False)
        self.register_buffer("nothing", None)
        self.lin = Linear(3, 3)
        self.bias = Parameter(np.zeros(3, np.float32))


class TorchWithBuffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("cache", torch.zeros(3), persistent=False)
        self.register_buffer("nothing", None)
        self.lin = torch.nn.Linear(3, 3)
        self.bias = torch.nn.Parameter(torch.zeros(3))


def test_register_buffer_follows_pytorch() -> None:
    model, tmodel = WithBuffers(), TorchWithBuffers()
    assert list(model.state_dict()) == list(tmodel.state_dict()) == [
        "bias", "scale", "lin.weight", "lin.bias",
    ]  # fmt: skip
    assert [n for n, _ in model.named_buffers()] == [n for n, _ in tmodel.named_buffers()]
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    state = {k: v.numpy() + 1.0 for k, v in tmodel.state_dict().items()}
    model.load_state_dict(state)
    np.testing.assert_array_equal(model.scale.data, np.full(3, 3.0, np.float32))
    model.scale = np.ones(3, np.float32)  # an array assigned to a buffer's name: a buffer
    assert isinstance(model.scale, Buffer) and model.scale.key_hint() == "scale"
    copied = copy.deepcopy(model)
    assert [n for n, _ in copied.named_buffers()] == ["scale", "cache"]
    assert copied.scale is not model.scale


def test_a_buffer_in_a_program_is_read_and_saved() -> None:
    class Scaled(Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", np.array([1.0, 2.0], np.float32))
            self.w = Parameter(np.ones(2, np.float32))

        def forward(self, x: object) -> object:
            return x * self.w * self.scale  # type: ignore[operator]

    m = Scaled()
    x = Feeder(lambda: np.ones(2, np.float32), shape=[2])
    m(x).sum().backward()
    assert m.w.grad is not None and m.scale.grad is None
    m.scale.assign(m.scale * 3.0)
    execute(backend="reference")
    np.testing.assert_array_equal(m.state_dict()["scale"], [3.0, 6.0])


def test_register_buffer_errors_say_what_is_wrong() -> None:
    m = BatchNorm1d(2)
    with pytest.raises(GradfuseError, match="attribute 'weight' already exists") as info:
        m.register_buffer("weight", np.zeros(2))
    assert "test_buffers.py" in str(info.value)
    with pytest.raises(GradfuseError, match="without '.'"):
        m.register_buffer("a.b", np.zeros(2))
    x = Feeder(lambda: np.zeros(2, np.float32), shape=[2])
    with pytest.raises(GradfuseError, match="needs host data"):
        m.register_buffer("traced", x)
