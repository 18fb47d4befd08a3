"""A computed tensor made a trainable leaf by `requires_grad_()`, and `-=`/`+=` on
tensors updating them in place, as the scratch model of PyTorch's "What is torch.nn
really?" writes them (tensor_methods.requires_grad_, Tensor.LEAF)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError

XS = np.random.default_rng(4).standard_normal((3, 8, 12)).astype(np.float32)
YS = np.random.default_rng(5).integers(0, 5, (3, 8))
LR = 0.5


def scratch_model(torch, weights, bias, xs, ys, zero_grad):  # noqa: ANN001, ANN201
    """The tutorial's loop over batches (its model, loss and update as written)."""

    def log_softmax(x):  # noqa: ANN001, ANN202
        return x - x.exp().sum(-1).log().unsqueeze(-1)

    def model(xb):  # noqa: ANN001, ANN202
        return log_softmax(xb @ weights + bias)

    def nll(input, target):  # noqa: ANN001, ANN202, A002
        return -input[range(target.shape[0]), target].mean()

    losses = []
    for xb, yb in zip(xs, ys, strict=True):
        loss = nll(model(xb), yb)
        loss.backward()
        with torch.no_grad():
            weights -= weights.grad * LR
            bias -= bias.grad * LR
            zero_grad(weights, bias)
        losses.append(loss)
    return losses


def test_the_tutorials_scratch_model_trains_as_pytorchs() -> None:
    torch = pytest.importorskip("torch")
    gradfuse.reset()
    gradfuse.manual_seed(0)
    weights = gradfuse.randn(12, 5) / math.sqrt(12)
    weights.requires_grad_()
    bias = gradfuse.zeros(5, requires_grad=True)
    start = weights.numpy()  # the drawn value, now a parameter's
    xs, ys = iter(XS), iter(YS)  # (a feeder's function runs each iteration)
    losses: list[float] = []

    def step() -> None:
        x = Feeder(lambda: next(xs), shape=[8, 12])
        y = Feeder(lambda: next(ys), shape=[8], dtype=np.int64)

        def zero(w, b):  # noqa: ANN001, ANN202
            w.grad.zero_()
            b.grad.zero_()

        (loss,) = scratch_model(gradfuse, weights, bias, [x], [y], zero)
        Receiver(lambda v: losses.append(float(v)), loss)

    ir_for(range(3), step)
    execute(backend="reference")
    tw = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    tb = torch.zeros(5, dtype=torch.float64, requires_grad=True)

    def torch_zero(w, b):  # noqa: ANN001, ANN202
        w.grad.zero_()
        b.grad.zero_()

    xs = [torch.tensor(x, dtype=torch.float64) for x in XS]
    want = scratch_model(torch, tw, tb, xs, [torch.tensor(y) for y in YS], torch_zero)
    # float32 against float64 (2026-12-07): losses of 0.8-2.5 within 7.1e-8 relative,
    # weights (up to 0.52) within 4.7e-8; bounds 20x and more above
    np.testing.assert_allclose(losses, [w.item() for w in want], rtol=2e-6)
    np.testing.assert_allclose(weights.numpy(), tw.detach().numpy(), rtol=0, atol=1e-6)
    assert not np.allclose(weights.numpy(), start)  # it trained


def test_in_place_operators_update_the_tensor_object() -> None:
    gradfuse.reset()
    x = gradfuse.tensor([1.0, 2.0])
    alias = x
    x += 1.0
    x *= gradfuse.tensor([2.0, 3.0])
    assert alias is x  # PyTorch's: the same tensor, updated
    got: list[np.ndarray] = []
    Receiver(lambda v: got.append(v), alias)
    execute(backend="reference")
    np.testing.assert_array_equal(got[0], [4.0, 9.0])


def test_a_tensor_the_host_cannot_compute_cannot_become_a_leaf() -> None:
    gradfuse.reset()
    x = Feeder(lambda: np.zeros(3, np.float32), shape=[3])
    with pytest.raises(GradfuseError, match=r"requires_grad_\(\): the tensor depends on the feeder"):
        (x * 2.0).requires_grad_()
    assert (x * 2.0).grad is None  # a computed tensor's .grad: None, as PyTorch's
    with pytest.raises(GradfuseError, match="only a leaf"):
        (x * 2.0).grad = None
