"""`gradfuse.no_grad()` and in-place updates as PyTorch's tutorials write them
(gradfuse/frontend/grad_mode.py, tensor_methods.py): `p -= lr * p.grad` updates the
parameter (before, Python rebound the name and the update was silently lost), outside
`no_grad` it is PyTorch's error, and what `no_grad` records carries no gradient."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
import gradfuse.nn as nn
from gradfuse import Feeder, Parameter, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError

X = np.random.default_rng(5).normal(size=(3, 4, 3)).astype(np.float32)


def manual_sgd(backend: str, update) -> tuple[list[float], dict[str, np.ndarray], dict]:  # noqa: ANN001
    """Three steps of a Linear(3, 2) on `X`, each `update(model)`d by hand after
    `backward()`: the losses, the start and the end state."""
    gradfuse.reset()
    gradfuse.manual_seed(1)
    model = nn.Linear(3, 2)
    start = {k: v.copy() for k, v in model.state_dict().items()}
    batches, losses = iter(X), []

    def step() -> None:
        x = Feeder(lambda: next(batches), shape=[4, 3])
        loss = model(x).pow(2).mean()
        loss.backward()
        update(model)
        Receiver(lambda v: losses.append(float(v)), loss)

    ir_for(range(3), step)
    execute(backend=backend)
    return losses, start, model.state_dict()


def torch_manual_sgd(start: dict) -> tuple[list[float], dict]:  # noqa: ANN001
    """The same three steps in PyTorch, float64, as its tutorial writes the update."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2).double()
    model.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in start.items()})
    losses = []
    for k in range(3):
        loss = model(torch.tensor(X[k], dtype=torch.float64)).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= p.grad * 0.1
            model.zero_grad()
        losses.append(loss.item())
    return losses, {k: v.numpy() for k, v in model.state_dict().items()}


def update_isub(model: nn.Module) -> None:
    with gradfuse.no_grad():
        for p in model.parameters():
            p -= p.grad * 0.1
        model.zero_grad()


def update_add_(model: nn.Module) -> None:
    with gradfuse.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.1)
            p.grad.zero_()


@pytest.mark.parametrize("update", [update_isub, update_add_])
@pytest.mark.parametrize("backend", ["reference", "c"])
def test_a_hand_written_update_under_no_grad_trains_as_pytorch(backend: str, update) -> None:  # noqa: ANN001
    losses, start, end = manual_sgd(backend, update)
    want_losses, want_end = torch_manual_sgd(start)
    # float32 against float64 (2026-12-07, reference and c): losses of 0.2-0.5 within
    # 8e-8 relative, params of ~0.5 within 1.5e-8; bounds with a 25x margin and more
    np.testing.assert_allclose(losses, want_losses, rtol=2e-6)
    for key, value in want_end.items():
        np.testing.assert_allclose(end[key], value, rtol=0, atol=1e-6)
    assert not np.allclose(end["weight"], start["weight"])  # it trained


def test_an_in_place_update_of_a_parameter_outside_no_grad_is_pytorchs_error() -> None:
    gradfuse.reset()
    p = Parameter(np.ones(3, np.float32), name="p")
    with pytest.raises(GradfuseError, match="updated in place while gradients are recorded"):
        p -= 1.0
    b = nn.Buffer(np.ones(3, np.float32))  # a buffer needs no no_grad (as PyTorch's)
    b += 1.0
    assert "tg.assign" in gradfuse.ir_text()


def test_what_no_grad_records_has_no_gradient() -> None:
    gradfuse.reset()
    p = Parameter(np.full(3, 2.0, np.float32), name="p")
    with gradfuse.no_grad():
        assert not gradfuse.is_grad_enabled()
        y = (p * p).sum()
        with gradfuse.enable_grad():
            z = (p * 3.0).sum()
    assert gradfuse.is_grad_enabled()
    with pytest.raises(GradfuseError, match="does not depend on any parameter"):
        y.backward()
    (z + y).backward()  # the gradient of z alone reaches p
    got: list[np.ndarray] = []
    Receiver(lambda g: got.append(g), p.grad)
    execute(backend="reference")
    np.testing.assert_array_equal(got[0], [3.0, 3.0, 3.0])


def test_no_grad_decorates_with_or_without_the_call() -> None:
    @gradfuse.no_grad
    def a() -> bool:
        return gradfuse.is_grad_enabled()

    @gradfuse.no_grad()
    def b() -> bool:
        return gradfuse.is_grad_enabled()

    assert (a(), b(), gradfuse.is_grad_enabled()) == (False, False, True)
    gradfuse.set_grad_enabled(False)  # a plain call sets the mode, as in PyTorch
    assert not gradfuse.is_grad_enabled()
    gradfuse.set_grad_enabled(True)
    with gradfuse.inference_mode():
        assert not gradfuse.is_grad_enabled()


def test_named_methods_masks_and_conversions_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(2).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    b = np.random.default_rng(3).integers(-2, 3, size=(2, 4, 3)).astype(np.float32)
    gradfuse.reset()
    x, y = gradfuse.constant(a), gradfuse.constant(b)
    m = x > 0
    outs = [
        x.add(x, alpha=2), x.sub(1.5, alpha=2), x.mul(3), x.div(4), x.neg(), x.square(),
        x.cos(), 2 ** x, x.bmm(y), x[0].mm(y[0]), x.eq(x.view_as(x) * 0 + 1).sum(),
        m.sum(), (m == 0).float(), m * x, m + 1.0, x.ne(0).float().mean(), x.ge(1).float(),
        x.le(1).float(), x.lt(0).float(), x.new_zeros(2, 2) + x.new_ones([2, 2]),
        x.new_full((3,), 2.5), x.expand_as(x * 1.0), x.double(), x.to(np.float64).half(),
        x.type_as(x.double()), x.cpu().to("cuda").clone(), y.reshape_as(x),
    ]  # fmt: skip
    assert x.type() == "torch.FloatTensor" and x.double().type() == "torch.DoubleTensor"
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), outs)
    execute(backend="reference")
    t, u = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    tm = t > 0
    want = [
        t.add(t, alpha=2), t.sub(1.5, alpha=2), t.mul(3), t.div(4), t.neg(), t.square(),
        t.cos(), 2 ** t, t.bmm(u), t[0].mm(u[0]), t.eq(t.view_as(t) * 0 + 1).sum(),
        tm.sum(), (tm == 0).float(), tm * t, tm + 1.0, t.ne(0).float().mean(), t.ge(1).float(),
        t.le(1).float(), t.lt(0).float(), t.new_zeros(2, 2) + t.new_ones([2, 2]),
        t.new_full((3,), 2.5), t.expand_as(t * 1.0), t.double(), t.to(torch.float64).half(),
        t.type_as(t.double()), t.cpu().clone(), u.reshape_as(t),
    ]  # fmt: skip
    assert [g.dtype for g in got[22:25]] == [np.float64, np.float16, np.float64]
    for g, w in zip(got, want, strict=True):
        # float32 of small integers: exact but for cos and 2**x (a few ulps of float32)
        np.testing.assert_allclose(g, w.double().numpy(), rtol=2e-6, atol=1e-6)


def test_arithmetic_on_two_masks_is_an_error_not_a_count() -> None:
    gradfuse.reset()
    m = gradfuse.constant(np.arange(3.0)) > 0
    with pytest.raises(GradfuseError, match="PyTorch's is logical"):
        m + m


def test_item_of_a_fed_tensor_says_to_receive_it_and_a_parameters_is_its_value() -> None:
    gradfuse.reset()
    p = Parameter(np.array([2.5], np.float32), name="p")
    x = Feeder(lambda: np.ones(1, np.float32), shape=[1])
    with pytest.raises(GradfuseError, match="Receiver"):
        (p * x).item()
    assert p.item() == 2.5 and (p * 2.0).item() == 5.0  # computed on the host now
