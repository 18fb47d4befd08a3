"""A parameter's `.data` as PyTorch code uses it (gradfuse/frontend/host_data.py):
word_language_model's `p.data.add_(p.grad, alpha=-lr)`, DCGAN's
`m.weight.data.normal_(0.0, 0.02)`, `w.data -= lr * w.grad`, a target network's
`copy_`; recorded where PyTorch would run it after what came before, done on the host
before the program otherwise."""

from __future__ import annotations

import io

import numpy as np
import pytest
from test_grad_mode_in_place import manual_sgd, torch_manual_sgd

import gradfuse
import gradfuse.nn as nn
from gradfuse import Parameter, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError


def update_data_add_(model: nn.Module) -> None:  # word_language_model's main.py
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
    model.zero_grad()


def update_data_isub(model: nn.Module) -> None:  # "w1.data -= learning_rate * w1.grad.data"
    for p in model.parameters():
        p.data -= 0.1 * p.grad.data
        p.grad = None


@pytest.mark.parametrize("update", [update_data_add_, update_data_isub])
@pytest.mark.parametrize("backend", ["reference", "c"])
def test_an_update_through_data_trains_as_pytorch(backend: str, update) -> None:  # noqa: ANN001
    losses, start, end = manual_sgd(backend, update)
    want_losses, want_end = torch_manual_sgd(start)
    # the bounds of test_grad_mode_in_place (the same steps): float32 against float64
    # losses within 8e-8 relative, params within 1.5e-8 (2026-12-07)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-6)
    for key, value in want_end.items():
        np.testing.assert_allclose(end[key], value, rtol=0, atol=1e-6)
    assert not np.allclose(end["weight"], start["weight"])


def test_dcgans_weights_init_draws_on_the_host_as_nn_init_does() -> None:
    def weights_init(m: nn.Module) -> None:  # PyTorch's DCGAN example, as written
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            m.weight.data.normal_(0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            m.weight.data.normal_(1.0, 0.02)
            m.bias.data.fill_(0)

    def net() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8))

    gradfuse.reset()
    gradfuse.manual_seed(3)
    a = net()
    a.apply(weights_init)
    gradfuse.manual_seed(3)
    b = net()
    nn.init.normal_(b[0].weight, 0.0, 0.02)
    nn.init.normal_(b[1].weight, 1.0, 0.02)
    nn.init.zeros_(b[1].bias)
    for key, value in b.state_dict().items():
        np.testing.assert_array_equal(a.state_dict()[key], value)
    assert gradfuse.ir_text().count("tg.") == 0  # nothing recorded


def test_an_update_after_a_read_is_recorded_and_one_before_is_not() -> None:
    gradfuse.reset()
    p = Parameter(np.ones(3, np.float32), name="p")
    p.data.mul_(2.0)  # before any read: the initial value
    np.testing.assert_array_equal(p.data, [2.0, 2.0, 2.0])
    got: list[np.ndarray] = []
    Receiver(lambda v: got.append(v), p * 1.0)
    p.data.mul_(3.0).add_(1.0)  # after the read: recorded, in order
    Receiver(lambda v: got.append(v), p * 1.0)
    np.testing.assert_array_equal(p.host, [2.0, 2.0, 2.0])  # not yet run
    assert gradfuse.ir_text().count('tg.assign "p"') == 2
    execute(backend="reference")
    np.testing.assert_array_equal(got[0], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(got[1], [7.0, 7.0, 7.0])
    np.testing.assert_array_equal(p.data, [7.0, 7.0, 7.0])


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_a_target_network_follows_by_copy_and_a_moving_average(backend: str) -> None:
    gradfuse.reset()
    source = Parameter(np.zeros(2, np.float32), name="source")
    target = Parameter(np.full(2, 10.0, np.float32), name="target")
    average = Parameter(np.zeros(2, np.float32), name="average")
    seen: list[np.ndarray] = []

    def step() -> None:
        with gradfuse.no_grad():
            source.add_(1.0)
        average.data.mul_(0.5).add_(source.data, alpha=0.5)  # an EMA, as RL code writes it
        target.data.copy_(source.data)
        Receiver(lambda *v: seen.append(np.stack(v)), [target, average])

    ir_for(range(3), step)
    execute(backend=backend)
    np.testing.assert_array_equal([s[0, 0] for s in seen], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal([s[1, 0] for s in seen], [0.5, 1.25, 2.125])
    np.testing.assert_array_equal(average.data, [2.125, 2.125])


def test_data_is_a_plain_array_where_it_is_kept() -> None:
    gradfuse.reset()
    model = nn.Linear(2, 3)
    w = model.weight.data
    assert isinstance(w, np.ndarray) and w.shape == (3, 2)
    assert type(w * 2.0) is np.ndarray and type(w.sum()) is not type(w)
    assert all(type(v) is np.ndarray for v in model.state_dict().values())
    buffer = io.BytesIO()
    gradfuse.save({"w": model.weight.data, "model": model.state_dict()}, buffer)
    buffer.seek(0)
    loaded = gradfuse.load(buffer)
    assert type(loaded["w"]) is np.ndarray
    np.testing.assert_array_equal(loaded["w"], model.weight.host)
    w[0, 0] = 5.0  # a view: writes the parameter's host array, as PyTorch's .data does
    assert model.weight.host[0, 0] == 5.0
    model.weight.data = np.zeros((3, 2), np.float32)
    np.testing.assert_array_equal(model.state_dict()["weight"], np.zeros((3, 2)))


def test_a_slice_of_data_takes_no_traced_value() -> None:
    gradfuse.reset()
    p = Parameter(np.ones((2, 3), np.float32), name="p")
    with pytest.raises(GradfuseError, match="a copy or slice of a parameter's .data is host"):
        p.data[0].add_(p.sum())
    p.data[0].fill_(4.0)  # host values: the row, now
    np.testing.assert_array_equal(p.host, [[4.0, 4.0, 4.0], [1.0, 1.0, 1.0]])


def test_a_computed_tensors_data_is_detached() -> None:
    gradfuse.reset()
    p = Parameter(np.full(3, 2.0, np.float32), name="p")
    y = p * 3.0
    ((y.data * p).sum()).backward()  # only the second factor's gradient
    got: list[np.ndarray] = []
    Receiver(lambda g: got.append(g), p.grad)
    execute(backend="reference")
    np.testing.assert_array_equal(got[0], [6.0, 6.0, 6.0])


def test_a_draw_in_the_program_names_what_to_write() -> None:
    gradfuse.reset()
    p = Parameter(np.ones(3, np.float32), name="p")

    def step() -> None:
        p.data.normal_(0.0, 0.02)

    with pytest.raises(GradfuseError, match=r"copy_\(gradfuse.randn\(p.shape\) \* std \+ mean\)"):
        ir_for(range(2), step)
    np.testing.assert_array_equal(p.host, [1.0, 1.0, 1.0])  # the host value is kept


def test_indexing_and_operators_on_data_follow_the_same_rule() -> None:
    gradfuse.reset()
    p = Parameter(np.ones((2, 3), np.float32), name="p")
    p.data[0] = 5.0  # before any read: the host array, now
    p.data *= 2.0
    np.testing.assert_array_equal(p.host, [[10.0] * 3, [2.0] * 3])
    got: list[np.ndarray] = []
    Receiver(lambda v: got.append(v), p * 1.0)
    p.data *= 3.0  # after the read: recorded, in order
    p.data[1, 1:] = -1.0
    Receiver(lambda v: got.append(v), p * 1.0)
    np.testing.assert_array_equal(p.host, [[10.0] * 3, [2.0] * 3])
    execute(backend="reference")
    np.testing.assert_array_equal(got[1], [[30.0] * 3, [6.0, -1.0, -1.0]])
    row = p.data[0]  # a slice: a view of the host memory, as PyTorch's
    row += 1.0
    np.testing.assert_array_equal(p.host[0], [31.0] * 3)
