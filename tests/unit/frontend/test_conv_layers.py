"""Conv2d, ConvTranspose2d, BatchNorm2d, pooling, LeakyReLU and Flatten against PyTorch.

Each case loads the PyTorch module's state_dict, then on the c backend and on the
reference interpreter compares: the forward output; the gradients of the input
and of every parameter for the loss `sum(out * R)`; and the state_dict (running
statistics of BatchNorm included) after 3 SGD steps on an MSE loss.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import (
    SGD,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    Flatten,
    LeakyReLU,
    MaxPool2d,
    Module,
    MSELoss,
    ReLU,
    Sequential,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

BACKENDS = ["c", "reference", "cuda"]
STEPS, LR = 3, 0.05
Case = tuple[Callable[[], Module], Callable[[], Any], tuple[int, ...]]


def _rand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


def run_gradfuse(
    model: Module, x: np.ndarray, r: np.ndarray, target: np.ndarray, backend: str
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """[output, input grad, param grads...] of `sum(model(x) * r)`, and the state after
    STEPS SGD steps on `mse(model(x), target)`."""
    xp = Parameter(x, name="input")
    out = model(xp)
    (out * gradfuse.constant(r)).sum().backward()
    trained = model.parameters()  # not the running statistics: buffers, as in PyTorch
    got: list[np.ndarray] = []
    grads = [xp.grad] + [p.grad for p in trained]
    Receiver(lambda *v: got.extend(v), [out] + grads, name="first")  # type: ignore[operator]
    opt = SGD(trained, lr=LR) if trained else None

    def step() -> None:  # without parameters, only the running statistics change
        out = model(Feeder(lambda: x, shape=x.shape, name="x"))
        if opt is not None:
            opt.zero_grad()
            MSELoss()(out, Feeder(lambda: target, shape=target.shape, name="t")).backward()
            opt.step()

    ir_for(range(STEPS), step)
    execute(backend=backend)
    return got, model.state_dict()


def run_torch(
    model: Any, x: np.ndarray, r: np.ndarray, target: np.ndarray
) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    xt = torch.tensor(x, requires_grad=True)
    out = model(xt)
    (out * torch.tensor(r)).sum().backward()
    trained = list(model.parameters())
    first = [out.detach().numpy(), xt.grad.numpy()] + [p.grad.numpy().copy() for p in trained]
    opt = torch.optim.SGD(trained, lr=LR) if trained else None
    for _ in range(STEPS):
        out = model(torch.tensor(x))
        if opt is not None:
            opt.zero_grad()
            torch.nn.functional.mse_loss(out, torch.tensor(target)).backward()
            opt.step()
    return first, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def compare(case: Case, backend: str, eval_mode: bool = False) -> None:
    """Runs `case` in both frameworks from PyTorch's initial state and compares."""
    make, make_torch, shape = case
    rng = np.random.default_rng(0)
    x = _rand(rng, shape)
    torch.manual_seed(0)
    tmodel = make_torch()
    model = make()
    model.load_state_dict(tmodel.state_dict())
    if eval_mode:
        model.eval(), tmodel.eval()
    with torch.no_grad():  # on a copy: a forward in training mode updates running stats
        out_shape = tuple(copy.deepcopy(tmodel)(torch.tensor(x)).shape)
    r, target = _rand(rng, out_shape), _rand(rng, out_shape)
    got, state = run_gradfuse(model, x, r, target, backend)
    want, want_state = run_torch(tmodel, x, r, target)
    names = ["output", "input grad"] + [f"{n} grad" for n, _ in tmodel.named_parameters()]
    assert len(got) == len(want)
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)
    assert list(state) == list(want_state)
    for k, w in want_state.items():
        np.testing.assert_allclose(state[k], w, rtol=1e-4, atol=1e-5, err_msg=k)


CASES: dict[str, Case] = {
    "conv-3x3-pad1": (
        lambda: Conv2d(3, 4, 3, padding=1),
        lambda: torch.nn.Conv2d(3, 4, 3, padding=1),
        (2, 3, 6, 6),
    ),
    "conv-stride2-groups2": (
        lambda: Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
        lambda: torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
        (2, 4, 7, 7),
    ),
    "conv-rect-dilated-nobias": (
        lambda: Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(0, 1), dilation=2, bias=False),
        lambda: torch.nn.Conv2d(
            3, 4, (3, 2), stride=(2, 1), padding=(0, 1), dilation=2, bias=False
        ),
        (2, 3, 9, 6),
    ),
    "conv-same-even-kernel": (
        lambda: Conv2d(2, 3, 4, padding="same"),
        lambda: torch.nn.Conv2d(2, 3, 4, padding="same"),
        (2, 2, 5, 5),
    ),
    "conv1d-k5-pad2": (
        lambda: Conv1d(3, 4, 5, padding=2),
        lambda: torch.nn.Conv1d(3, 4, 5, padding=2),
        (2, 3, 7),
    ),
    "conv1d-stride-dilated-groups-nobias": (
        lambda: Conv1d(4, 6, 3, stride=2, padding=(1,), dilation=2, groups=2, bias=False),
        lambda: torch.nn.Conv1d(4, 6, 3, stride=2, padding=(1,), dilation=2, groups=2, bias=False),
        (2, 4, 9),
    ),
    "conv1d-same-even-kernel": (
        lambda: Conv1d(2, 3, 4, padding="same"),
        lambda: torch.nn.Conv1d(2, 3, 4, padding="same"),
        (2, 2, 6),
    ),
    "conv1d-bn1d-relu": (  # Tacotron's encoder and postnet blocks
        lambda: Sequential(Conv1d(3, 4, 5, padding=2, bias=False), BatchNorm1d(4), ReLU()),
        lambda: torch.nn.Sequential(
            torch.nn.Conv1d(3, 4, 5, padding=2, bias=False),
            torch.nn.BatchNorm1d(4),
            torch.nn.ReLU(),
        ),  # fmt: skip
        (2, 3, 6),
    ),
    "convT-4x4-stride2": (
        lambda: ConvTranspose2d(4, 3, 4, stride=2, padding=1),
        lambda: torch.nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1),
        (2, 4, 4, 4),
    ),
    "convT-groups-outpad": (
        lambda: ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        (2, 4, 3, 3),
    ),
    "convT-dilated-nobias": (
        lambda: ConvTranspose2d(3, 2, 3, bias=False, dilation=2),
        lambda: torch.nn.ConvTranspose2d(3, 2, 3, bias=False, dilation=2),
        (2, 3, 3, 4),
    ),
    "batchnorm2d": (lambda: BatchNorm2d(3), lambda: torch.nn.BatchNorm2d(3), (4, 3, 3, 3)),
    "batchnorm2d-cumulative-no-affine": (
        lambda: BatchNorm2d(3, eps=1e-3, momentum=None, affine=False),
        lambda: torch.nn.BatchNorm2d(3, eps=1e-3, momentum=None, affine=False),
        (2, 3, 4, 4),
    ),
    "batchnorm2d-no-running-stats": (
        lambda: BatchNorm2d(3, track_running_stats=False),
        lambda: torch.nn.BatchNorm2d(3, track_running_stats=False),
        (2, 3, 4, 4),
    ),
    "batchnorm1d": (lambda: BatchNorm1d(5), lambda: torch.nn.BatchNorm1d(5), (6, 5)),
    "conv-bn-leaky": (
        lambda: Sequential(Conv2d(2, 4, 3, padding=1), BatchNorm2d(4), LeakyReLU(0.2)),
        lambda: torch.nn.Sequential(
            torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.LeakyReLU(0.2)
        ),
        (2, 2, 5, 5),
    ),
    "maxpool-3-2-1": (
        lambda: MaxPool2d(3, 2, 1),
        lambda: torch.nn.MaxPool2d(3, 2, 1),
        (2, 3, 7, 7),
    ),
    "maxpool-2": (lambda: MaxPool2d(2), lambda: torch.nn.MaxPool2d(2), (2, 2, 6, 4)),
    "maxpool-rect-dilated": (
        lambda: MaxPool2d((3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)),
        lambda: torch.nn.MaxPool2d((3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)),
        (1, 2, 6, 6),
    ),
    "avgpool-3-2-1": (
        lambda: AvgPool2d(3, 2, 1),
        lambda: torch.nn.AvgPool2d(3, 2, 1),
        (2, 3, 7, 7),
    ),
    "avgpool-exclude-pad": (
        lambda: AvgPool2d(3, 2, 1, count_include_pad=False),
        lambda: torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
        (2, 3, 6, 5),
    ),
    "adaptive-1x1": (
        lambda: AdaptiveAvgPool2d((1, 1)),
        lambda: torch.nn.AdaptiveAvgPool2d((1, 1)),
        (2, 3, 5, 5),
    ),
    "adaptive-divisible": (
        lambda: AdaptiveAvgPool2d(2),
        lambda: torch.nn.AdaptiveAvgPool2d(2),
        (2, 3, 4, 6),
    ),
    "adaptive-general": (
        lambda: AdaptiveAvgPool2d((3, None)),
        lambda: torch.nn.AdaptiveAvgPool2d((3, None)),
        (2, 2, 7, 5),
    ),
    "adaptive-both-ragged": (
        lambda: AdaptiveAvgPool2d((4, 3)),
        lambda: torch.nn.AdaptiveAvgPool2d((4, 3)),
        (1, 2, 7, 5),
    ),
    "leaky-maxpool": (
        lambda: Sequential(LeakyReLU(0.5), MaxPool2d(3, 2, 1)),
        lambda: torch.nn.Sequential(torch.nn.LeakyReLU(0.5), torch.nn.MaxPool2d(3, 2, 1)),
        (2, 2, 6, 6),
    ),
    "resnet-stem": (
        lambda: Sequential(
            Conv2d(3, 4, 7, 2, 3, bias=False), BatchNorm2d(4), ReLU(), MaxPool2d(3, 2, 1)
        ),
        lambda: torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 7, 2, 3, bias=False),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
        ),
        (2, 3, 16, 16),
    ),
    "conv-avgpool-exclude-pad": (
        lambda: Sequential(Conv2d(2, 3, 1), AvgPool2d(3, 2, 1, count_include_pad=False)),
        lambda: torch.nn.Sequential(
            torch.nn.Conv2d(2, 3, 1), torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)
        ),
        (2, 2, 5, 6),
    ),
    "leaky-default": (lambda: LeakyReLU(), lambda: torch.nn.LeakyReLU(), (3, 4, 2)),
    "leaky-steep": (lambda: LeakyReLU(1.5), lambda: torch.nn.LeakyReLU(1.5), (3, 4)),
    "flatten": (
        lambda: Sequential(Flatten(), BatchNorm1d(12)),
        lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.BatchNorm1d(12)),
        (3, 3, 2, 2),
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_module_matches_pytorch(name: str, backend: str) -> None:
    compare(CASES[name], backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["batchnorm2d", "conv-bn-leaky"])
def test_eval_mode_matches_pytorch(name: str, backend: str) -> None:
    """In eval mode the running statistics normalise and stay as they are."""
    compare(CASES[name], backend, eval_mode=True)


def test_state_dict_names_and_layouts_are_pytorchs() -> None:
    for make, make_torch in [
        (lambda: Conv2d(4, 6, (3, 2), groups=2), lambda: torch.nn.Conv2d(4, 6, (3, 2), groups=2)),
        (
            lambda: ConvTranspose2d(4, 6, 3, groups=2, bias=False),
            lambda: torch.nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False),
        ),
        (lambda: BatchNorm2d(5), lambda: torch.nn.BatchNorm2d(5)),
        (lambda: Conv1d(4, 6, 3, groups=2), lambda: torch.nn.Conv1d(4, 6, 3, groups=2)),
    ]:
        state, want = make().state_dict(), make_torch().state_dict()
        assert list(state) == list(want)
        for k, v in want.items():
            assert state[k].shape == tuple(v.shape), k
            if k != "weight" and k != "bias" or isinstance(make(), BatchNorm2d):
                np.testing.assert_array_equal(state[k], v.numpy(), err_msg=k)


def test_default_init_is_kaiming_uniform_from_manual_seed() -> None:
    gradfuse.manual_seed(3)
    conv = Conv2d(8, 16, 3, groups=2)
    up = ConvTranspose2d(16, 8, 4, groups=4)
    seq = Conv1d(8, 16, 5, groups=2)
    gradfuse.manual_seed(3)
    np.testing.assert_array_equal(Conv2d(8, 16, 3, groups=2).weight.data, conv.weight.data)
    for module, fan_in in [(conv, 4 * 9), (up, 2 * 16), (seq, 4 * 5)]:
        bound = 1.0 / np.sqrt(fan_in)
        for p in (module.weight.data, module.bias.data):  # type: ignore[union-attr]
            assert np.abs(p).max() <= bound and np.abs(p).max() > 0.6 * bound
        assert abs(float(module.weight.data.std()) - bound / np.sqrt(3)) < 0.15 * bound


def test_batchnorm_buffers_get_no_gradient_and_count_batches() -> None:
    bn = BatchNorm2d(2)
    opt = SGD(bn.parameters(), lr=0.1, momentum=0.9)
    x = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)

    def step() -> None:
        opt.zero_grad()
        bn.eval()
        bn(Feeder(lambda: x, shape=x.shape)).sum().backward()  # reads the running stats
        bn.train()
        opt.step()

    ir_for(range(2), step)
    execute()
    assert bn.running_mean is not None and bn.running_var is not None
    np.testing.assert_array_equal(bn.running_mean.data, [0.0, 0.0])
    np.testing.assert_array_equal(bn.running_var.data, [1.0, 1.0])
    assert {f"{i}.momentum_buffer" for i in (0, 1)} == set(opt.state_dict())
    bn(Feeder(lambda: x, shape=x.shape))
    bn(Feeder(lambda: x, shape=x.shape))
    execute(backend="reference")
    assert float(bn.num_batches_tracked.data) == 2.0  # type: ignore[union-attr]


def test_functional_namespace_has_conv_and_pooling() -> None:
    import gradfuse.nn.functional as F

    x = Feeder(lambda: np.ones((1, 2, 4, 4), np.float32), shape=[1, 2, 4, 4])
    w = Parameter(np.ones((3, 2, 3, 3), np.float32), name="w")
    y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
    assert y.shape == (1, 3, 2, 2)
    assert F.flatten(y, 1).shape == (1, 12) and F.layer_norm is not None


def test_shape_errors_name_the_module_and_the_users_line() -> None:
    x = Feeder(lambda: np.ones((2, 3, 8, 8), np.float32), shape=[2, 3, 8, 8])
    with pytest.raises(GradfuseError, match="BatchNorm2d\\(4\\): expected an input") as info:
        BatchNorm2d(4)(x)
    assert "test_conv_layers.py" in str(info.value)
    with pytest.raises(GradfuseError, match="tg.conv2d"):
        Conv2d(4, 2, 3)(x)
    with pytest.raises(GradfuseError, match="divisible by groups"):
        Conv2d(3, 4, 3, groups=2)
    seq = Feeder(lambda: np.ones((2, 3, 8), np.float32), shape=[2, 3, 8])
    with pytest.raises(GradfuseError, match="conv1d: input 2x3x8 has 3 channels, weight") as info:
        Conv1d(4, 2, 3)(seq)
    assert "test_conv_layers.py" in str(info.value)
    with pytest.raises(GradfuseError, match="expected an input \\[N, C, L\\] or \\[C, L\\]"):
        Conv1d(4, 2, 3)(x)
    with pytest.raises(GradfuseError, match="Conv1d kernel_size: expected one int"):
        Conv1d(4, 2, (3, 3))
    with pytest.raises(GradfuseError, match="at most half of kernel_size"):
        MaxPool2d(2, padding=2)(x)
    with pytest.raises(GradfuseError, match="more than 1 value per channel"):
        BatchNorm1d(3)(Feeder(lambda: np.ones((1, 3), np.float32), shape=[1, 3]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv1d_of_an_unbatched_input_matches_pytorch(backend: str) -> None:
    """F.conv1d on [C, L] as PyTorch takes it; float32 against float32, one 3-tap sum per
    output, so 1e-6 holds (measured 2e-7)."""
    import gradfuse.nn.functional as F

    rng = np.random.default_rng(0)
    x, w = _rand(rng, (3, 6)), _rand(rng, (2, 3, 3))
    b = _rand(rng, (2,))
    got: list[np.ndarray] = []
    y = F.conv1d(gradfuse.constant(x), gradfuse.constant(w), gradfuse.constant(b), padding=1)
    Receiver(got.append, y)
    execute(backend=backend)
    want = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1)
    np.testing.assert_allclose(got[0], want.numpy(), rtol=1e-6, atol=1e-6)
