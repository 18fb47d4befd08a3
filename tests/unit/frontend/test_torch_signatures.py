"""gradfuse.nn's modules and optimizers take PyTorch's constructor parameters in PyTorch's
order; values gradfuse cannot honour are one clear error."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import numpy as np
import pytest

import gradfuse
import gradfuse.nn as gnn
from gradfuse import Feeder, execute
from gradfuse.diagnostics import GradfuseError

NOT_TORCH_CLASSES = {"Module", "Parameter", "Buffer", "Optimizer"}  # other kinds of object
DEFAULTS_THAT_DIFFER = {  # "relu" for F.relu
    ("TransformerEncoderLayer", "activation"),
    ("TransformerDecoderLayer", "activation"),
    ("Transformer", "activation"),
}


def torch_class(torch: Any, name: str) -> Any:
    return getattr(torch.nn, name, None) or getattr(torch.optim, name, None)


def parameters(cls: Any) -> list[inspect.Parameter]:
    """The parameters of `cls.__init__` after self; for an `__init__(*args, **kwargs)` with
    `@overload`s (torch's RNN, GRU, LSTM), those of its first, explicit overload."""
    init = cls.__init__
    overloads = [o for o in typing.get_overloads(init) if o is not init]
    if overloads and "args" in inspect.signature(init).parameters:
        init = overloads[0]
    return list(inspect.signature(init).parameters.values())[1:]


def shown(p: inspect.Parameter) -> tuple[str, Any]:
    """A parameter by its name (the name of `*args` cannot be passed: only its kind)."""
    return ("*" if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) else p.name, p.kind)


@pytest.mark.parametrize("name", [n for n in gnn.__all__ if n not in NOT_TORCH_CLASSES])
def test_constructor_signature_is_torchs(name: str) -> None:
    torch = pytest.importorskip("torch")
    ours = getattr(gnn, name)
    if not inspect.isclass(ours):
        pytest.skip("not a class")
    theirs = torch_class(torch, name)
    assert theirs is not None, f"torch has no {name}"
    got, want = parameters(ours), parameters(theirs)
    if [p.kind for p in want] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        want = []  # torch's Module.__init__(*args, **kwargs): the class takes nothing itself
        got = [p for p in got if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert [shown(p) for p in got] == [shown(p) for p in want]
    for g, w in zip(got, want, strict=True):
        if (name, g.name) in DEFAULTS_THAT_DIFFER or w.default is inspect.Parameter.empty:
            continue
        assert g.default == w.default, f"{name}({g.name}=...)"


def test_dcgan_tutorial_constructors() -> None:
    """The lines of PyTorch's DCGAN tutorial, as written, build the same layers."""
    torch = pytest.importorskip("torch")
    nc, ndf = 3, 8
    ours = gnn.Sequential(
        gnn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
        gnn.LeakyReLU(0.2, inplace=True),
        gnn.Conv2d(ndf, 1, 4, 1, 0, bias=False),
        gnn.BatchNorm2d(1),
        gnn.ReLU(True),
        gnn.Dropout(0.0, True),
        gnn.Sigmoid(),
    )
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
        torch.nn.LeakyReLU(0.2, inplace=True),
        torch.nn.Conv2d(ndf, 1, 4, 1, 0, bias=False),
        torch.nn.BatchNorm2d(1),
        torch.nn.ReLU(True),
        torch.nn.Dropout(0.0, True),
        torch.nn.Sigmoid(),
    )
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(2, nc, 8, 8)).astype(np.float32)
    got: list[np.ndarray] = []
    gradfuse.Receiver(got.append, ours(Feeder(x, shape=x.shape)))
    execute("reference")
    want = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)


def test_softmax_without_dim_and_legacy_reductions_are_torchs() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    t = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    got: list[np.ndarray] = []
    xs, ts = Feeder(x, shape=x.shape), Feeder(t, shape=t.shape)
    gradfuse.Receiver(lambda *a: got.extend(a), [
        gnn.Softmax()(xs), gnn.LogSoftmax()(xs), gnn.MSELoss(size_average=False)(xs, ts),
        gnn.MSELoss(None, False)(xs, ts),
    ])  # fmt: skip
    execute("reference")
    with pytest.warns(UserWarning):  # torch warns about the implicit dim, then chooses 0 here
        want = [torch.nn.Softmax()(torch.tensor(x)), torch.nn.LogSoftmax()(torch.tensor(x))]
    want += [
        torch.nn.MSELoss(size_average=False)(torch.tensor(x), torch.tensor(t)),
        torch.nn.MSELoss(None, False)(torch.tensor(x), torch.tensor(t)),
    ]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_sgd_nesterov_and_maximize_are_torchs() -> None:
    torch = pytest.importorskip("torch")
    model = gnn.Linear(3, 2)
    tmodel = torch.nn.Linear(3, 2)
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    x = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    opt = gnn.SGD(model.parameters(), 0.1, 0.9, 0, 0.01, True, maximize=True)
    topt = torch.optim.SGD(tmodel.parameters(), 0.1, 0.9, 0, 0.01, True, maximize=True)

    def step() -> None:
        opt.zero_grad()
        (model(Feeder(x, shape=[4, 3])) ** 2).mean().backward()
        opt.step()

    gradfuse.ir_for(range(3), step)
    execute("reference")
    for _ in range(3):
        topt.zero_grad()
        (tmodel(torch.tensor(x)) ** 2).mean().backward()
        topt.step()
    for key, value in tmodel.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[key], value.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: gnn.Embedding(10, 4, padding_idx=0), "padding_idx=0 is not supported"),
        (lambda: gnn.Embedding(10, 4, None, None, 2.0, False, True), "sparse=True"),
        (lambda: gnn.Conv2d(1, 1, 3, padding_mode="reflect"), "padding_mode='reflect'"),
        (lambda: gnn.MaxPool2d(2, 2, 0, 1, True), "return_indices=True"),
        (lambda: gnn.Linear(2, 2, dtype=np.float64), "dtype="),
        (lambda: gnn.LayerNorm(4, device="mps"), "device='mps'"),
        (lambda: gnn.CrossEntropyLoss(np.ones(3)), "weight="),
        (lambda: gnn.BCELoss(np.ones(3)), "weight="),
        (lambda: gnn.MultiheadAttention(8, 2, 0.0, True, True), "add_bias_kv=True"),
        (lambda: gnn.SGD([gnn.Parameter(np.zeros(2))], 0.1, 0.9, 0.5), "dampening=0.5"),
        (lambda: gnn.Adam([gnn.Parameter(np.zeros(2))], differentiable=True), "differentiable"),
    ],
)
def test_unsupported_values_are_one_clear_error(make: Any, words: str) -> None:
    with pytest.raises(GradfuseError, match=words.replace("(", r"\(")):
        make()


def test_supported_torch_options_take_effect() -> None:
    """Harmless options are accepted, and the ones gradfuse implements change the layer."""
    assert gnn.BatchNorm2d(4, bias=False).bias is None
    assert gnn.BatchNorm2d(4, 1e-5, 0.1, True, False).running_mean is None
    assert gnn.Linear(2, 3, True, "cpu", np.float32).weight.shape == (3, 2)
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(gnn.Embedding(3, 2, _weight=table).weight.data, table)
    adam = gnn.Adam([gnn.Parameter(np.zeros(2))], decoupled_weight_decay=True)
    assert adam.decoupled and not gnn.Adam([gnn.Parameter(np.zeros(2))]).decoupled
