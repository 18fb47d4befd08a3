"""gradfuse.nn: names, layouts, initialisation and provenance of modules."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import SGD, Linear, Module, Parameter, ReLU, Sequential, Sigmoid, Tanh
from gradfuse.provenance import provenance_of


def test_state_dict_names_and_layouts_follow_pytorch() -> None:
    model = Sequential(Linear(4, 8), Sigmoid(), Linear(8, 2, bias=False))
    state = model.state_dict()
    assert list(state) == ["0.weight", "0.bias", "2.weight"]
    assert state["0.weight"].shape == (8, 4) and state["0.bias"].shape == (8,)
    assert state["2.weight"].shape == (2, 8)
    assert all(v.dtype == np.float32 for v in state.values())
    assert [n for n, _ in model.named_parameters()] == list(state)
    assert len(model.parameters()) == 3


def test_nested_modules_get_dotted_names() -> None:
    class Block(Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear1 = Linear(3, 3)
            self.act = Tanh()

        def forward(self, x: gradfuse.Tensor) -> gradfuse.Tensor:
            return self.act(self.linear1(x))

    class Net(Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = Sequential(Block(), Block())

        def forward(self, x: gradfuse.Tensor) -> gradfuse.Tensor:
            return self.layers(x)

    net = Net()
    assert list(net.state_dict()) == [
        "layers.0.linear1.weight",
        "layers.0.linear1.bias",
        "layers.1.linear1.weight",
        "layers.1.linear1.bias",
    ]
    x = Feeder(lambda: np.zeros((2, 3), np.float32), shape=[2, 3])
    net(x)
    text = gradfuse.ir_text(print_locations=True)
    assert 'tg.param "layers.1.linear1.weight"' in text
    assert re.search(
        r'tg\.dot .*loc\("forward@layers\.1\.linear1"\("tests/unit/frontend/test_nn\.py"', text
    )
    assert re.search(r'tg\.tanh .*loc\("forward@layers\.0\.act"', text)


def test_load_state_dict_roundtrip_and_errors() -> None:
    model = Sequential(Linear(3, 2), ReLU())
    state = {k: np.full_like(v, 0.5) for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    assert all(np.all(v == 0.5) for v in model.state_dict().values())
    with pytest.raises(GradfuseError, match="missing keys"):
        model.load_state_dict({"0.weight": state["0.weight"]})
    with pytest.raises(GradfuseError, match="shape"):
        model.load_state_dict({"0.weight": np.zeros((3, 2)), "0.bias": state["0.bias"]})


def test_linear_init_is_pytorch_default_and_seeded() -> None:
    gradfuse.manual_seed(7)
    a = Linear(100, 50).state_dict()
    gradfuse.manual_seed(7)
    b = Linear(100, 50).state_dict()
    c = Linear(100, 50).state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["weight"], c["weight"])
    bound = 1 / math.sqrt(100)
    assert np.abs(a["weight"]).max() <= bound and np.abs(a["bias"]).max() <= bound
    assert np.abs(a["weight"]).max() > 0.9 * bound  # uniform over the whole range
    assert abs(float(a["weight"].std()) - bound / math.sqrt(3)) < 0.01


def test_param_keys_are_unique_across_models() -> None:
    first, second = Linear(2, 2), Linear(2, 2)
    x = Feeder(lambda: np.zeros((1, 2), np.float32), shape=[1, 2])
    second(first(x))
    text = gradfuse.ir_text()
    assert 'tg.param "weight"' in text and 'tg.param "weight_1"' in text


def test_sgd_step_records_updates_with_optimizer_provenance() -> None:
    model = Linear(3, 2)
    opt = SGD(model.parameters(), lr=0.1)
    x = Feeder(lambda: np.zeros((4, 3), np.float32), shape=[4, 3])
    opt.zero_grad()
    model(x).backward()
    n_before = len(list(gradfuse.frontend.recorder.program().block.ops))
    opt.zero_grad()  # records nothing
    assert len(list(gradfuse.frontend.recorder.program().block.ops)) == n_before
    model(x).backward()
    opt.step()
    ops = list(gradfuse.frontend.recorder.program().block.ops)
    assigns = [op for op in ops if op.name == "tg.assign"]
    assert [op.key.data for op in assigns] == ["weight", "bias"]  # type: ignore[attr-defined]
    assert all(provenance_of(op.location).direction == "optimizer" for op in assigns)
    grads = [op for op in ops if op.name == "tg.grad"]
    assert provenance_of(grads[-1].location).direction == "backward"


def test_parameters_for_receiver_can_be_a_bound_method() -> None:
    model = Linear(2, 2)
    opt = SGD(model.parameters(), lr=0.1)
    gradfuse.Receiver(lambda *a: None, opt.parameters, name="save")
    assert 'tg.receiver "save", %0, %1' in gradfuse.ir_text()


def test_module_without_super_init_says_so() -> None:
    class Bad(Module):
        def __init__(self) -> None:
            self.w = Parameter(np.zeros(2, np.float32))

    with pytest.raises(AttributeError, match="super"):
        Bad()
