"""Bugs met while building the conv/pooling modules and examples, each a minimal
reproduction (against the reference backend or PyTorch), now fixed:
- the c renderer names every index of a kernel's loop nest (one was undeclared);
- tg-fuse reads a padded input only where it exists (no dead out-of-bounds load);
- C math functions and max follow the float width (float64 went through sqrtf/fmaxf);
- tg-autodiff's dependence stops at tg.stop_gradient (a GAN's generator step after the
  discriminator's step on `fake.detach()` walked the update's ops);
- BCELoss's gradient at a saturated probability is finite (it was nan, which turned
  examples/dcgan.py's losses into nan once its discriminator saturated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, execute
from gradfuse.dialects import tg
from gradfuse.frontend.functional_conv import conv2d, max_pool2d
from gradfuse.frontend.recorder import emit
from gradfuse.frontend.tensor import Tensor
from gradfuse.nn import BCELoss


def _on(backend: str, build: Callable[[], Any]) -> tuple[np.ndarray, np.ndarray]:
    """What `build()` (which records and returns one tensor) gives on `backend` and on the
    reference."""
    results = []
    for name in (backend, "reference"):
        out: list[np.ndarray] = []
        Receiver(out.append, build())
        execute(backend=name)
        results.append(out[0])
    return results[0], results[1]


def _padded(x: Tensor, value: float) -> Tensor:
    return Tensor(emit(tg.PadOp(x.value, [0, 0, 1, 1], [0, 0, 1, 1], value)).result)


def test_gradient_of_max_of_strided_slices_of_a_pad_compiles_on_c() -> None:
    def build() -> Any:
        x = Parameter(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2), name="x")
        p = _padded(x, 0.0)  # 4x4
        p[:, :, 0:3:2, 0:3:2].maximum(p[:, :, 1:4:2, 1:4:2]).sum().backward()
        return x.grad

    c, reference = _on("c", build)
    np.testing.assert_array_equal(reference.ravel(), [1, 0, 0, 1])
    np.testing.assert_array_equal(c, reference)


def test_pad_with_a_value_reads_in_bounds() -> None:
    def build() -> Any:
        x = Parameter(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2), name="x")
        p = _padded(x, -np.inf)
        return p[:, :, 0:3:2, 0:3:2].maximum(p[:, :, 1:4:2, 1:4:2])

    numpy, reference = _on("numpy", build)
    np.testing.assert_array_equal(numpy, reference)


def test_float64_sqrt_on_c() -> None:
    x = np.full(4, 2.0)

    def build() -> Any:
        return Feeder(lambda: x, shape=[4], dtype=np.float64).sqrt()

    c, reference = _on("c", build)
    np.testing.assert_array_equal(c, reference)


def test_float64_gradient_through_conv_and_max_pool_on_c() -> None:
    x = np.random.default_rng(0).normal(size=(1, 1, 3, 3))

    def build() -> Any:
        w = Parameter(np.full((1, 1, 1, 1), 0.5), name="w")
        y = max_pool2d(conv2d(Feeder(lambda: x, shape=x.shape, dtype=np.float64), w), 3, 2, 1)
        y.sum().backward()
        return w.grad

    c, reference = _on("c", build)
    assert np.isfinite(reference).all()
    np.testing.assert_allclose(c, reference, rtol=1e-12)


def test_bce_gradient_of_a_saturated_probability_is_finite() -> None:
    x = Parameter(np.array([20.0, -5.0], np.float32), name="x")
    target = gradfuse.constant(np.array([1.0, 0.0], np.float32))
    BCELoss()(x.sigmoid(), target).backward()
    out: list[np.ndarray] = []
    Receiver(out.append, x.grad)
    execute(backend="reference")
    np.testing.assert_allclose(out[0], [0.0, 0.5 * 1 / (1 + np.exp(5.0))], rtol=1e-5)


def test_backward_after_an_update_from_detached_data() -> None:
    torch = pytest.importorskip("torch")
    x = np.ones((1, 1, 3, 3), np.float32)
    w_g = Parameter(np.full((1, 1, 1, 1), 0.5, np.float32), name="w_g")
    w_d = Parameter(np.ones((1, 1, 3, 3), np.float32), name="w_d")
    fake = conv2d(Feeder(lambda: x, shape=[1, 1, 3, 3]), w_g)
    conv2d(fake.detach(), w_d, padding=1).sum().backward()
    w_d.assign(w_d - w_d.grad * 0.1)  # type: ignore[operator]
    conv2d(fake, w_d, padding=1).sum().backward()
    out: list[np.ndarray] = []
    Receiver(out.append, w_g.grad)
    execute(backend="reference")
    tw_g = torch.full((1, 1, 1, 1), 0.5, requires_grad=True)
    tw_d = torch.ones((1, 1, 3, 3), requires_grad=True)
    tfake = torch.nn.functional.conv2d(torch.tensor(x), tw_g)
    torch.nn.functional.conv2d(tfake.detach(), tw_d, padding=1).sum().backward()
    with torch.no_grad():
        tw_d -= tw_d.grad * 0.1
    torch.nn.functional.conv2d(tfake, tw_d, padding=1).sum().backward()
    np.testing.assert_allclose(out[0], tw_g.grad.numpy(), rtol=1e-6)
