"""PyTorch's regression losses, the activations ReLU6, Hardswish, Mish, Softsign and
LogSigmoid, `F.one_hot` and `nn.Unflatten` (functional_loss.py, functional_act.py,
nn/activation.py, nn/loss.py): values and gradients against PyTorch's float64, at the
kinks too (where a loss turns from squared to linear, the activations' bounds)."""

from __future__ import annotations

import gradfuse.nn.functional as F
import numpy as np
import pytest
from test_torch_methods import run  # (this directory is on the path)

import gradfuse
import gradfuse.nn as nn
from gradfuse import Tensor
from gradfuse.diagnostics import GradfuseError

POINTS = np.array([[-40.0, -3.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 3.0, 6.0, 7.5, 40.0]], np.float32)
"""The kinks: 0 and 6 (relu6), -3 and 3 (hardswish), +-0.5 and +-1 (the losses' beta and
delta, as differences from a target of 0), and far out (logsigmoid, mish, softsign)."""


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_losses_and_activations_match_pytorch_at_their_kinks(backend: str) -> None:
    torch = pytest.importorskip("torch")
    zero = np.zeros_like(POINTS)

    def outputs(m, x, t):  # noqa: ANN001, ANN202
        f = m.nn.functional
        return [
            f.relu6(x), m.nn.Hardswish()(x), f.mish(x), m.nn.Softsign()(x), f.logsigmoid(x),
            f.l1_loss(x, t, reduction="none"), f.smooth_l1_loss(x, t, reduction="none"),
            f.smooth_l1_loss(x, t, reduction="sum", beta=0.5), m.nn.L1Loss()(x, t),
            f.huber_loss(x, t, reduction="none", delta=0.5), m.nn.HuberLoss()(x, t),
            m.nn.SmoothL1Loss(beta=0.0)(x, t),
        ]  # fmt: skip

    weights = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]

    def ours(p: Tensor):  # noqa: ANN202
        outs = outputs(gradfuse, p, gradfuse.constant(zero))
        return sum((o * w).sum() for o, w in zip(outs, weights)), outs

    got = run(backend, ours, POINTS)
    x = torch.tensor(POINTS, dtype=torch.float64, requires_grad=True)
    outs = outputs(torch, x, torch.zeros_like(x))
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    for k, (g, w) in enumerate(zip(got, [*outs, x.grad], strict=True)):
        # float32 against float64 (2026-12-07, reference and c alike): within 4.4e-7
        # relative, mish at -3 (softplus's exp and log1p, then tanh and a product: 7
        # units of 2^-24); the rest within 2.8e-7. The kinks' gradients are exact (l1's
        # is 0 at 0, hardswish's 0 at -3 and 1 at 3, the losses' turn at beta and delta)
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=2e-6, atol=1e-7, err_msg=str(k))


def test_one_hot_and_unflatten() -> None:
    gradfuse.reset()
    labels = gradfuse.tensor([2, 0, 3])
    y = F.one_hot(labels, num_classes=4)
    z = nn.Unflatten(1, (2, 2))(y)
    got: list[np.ndarray] = []
    gradfuse.Receiver(lambda *v: got.extend(v), [y, z])
    gradfuse.execute(backend="reference")
    np.testing.assert_array_equal(got[0], np.eye(4)[[2, 0, 3]])
    assert got[1].shape == (3, 2, 2)
    gradfuse.reset()
    with pytest.raises(GradfuseError, match="num_classes must be given"):
        F.one_hot(gradfuse.tensor([1.0]))
