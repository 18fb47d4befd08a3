"""Guarded views through fusion, c against the reference: bugs met while building
pooling and the DCGAN, each a minimal reproduction (fixed in tg-fuse: a producer read
through a padding guard is not recomputed in a consumer's prologue, where the guard
would be lost; tg.pad reads its input through the views between it and its buffer).
The convolution cases are inference programs, where an activation feeds only a conv.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, execute
from gradfuse.dialects import tg
from gradfuse.frontend.functional_conv import conv2d, conv_transpose2d
from gradfuse.frontend.recorder import emit
from gradfuse.frontend.tensor import Tensor


def _c_and_reference(build: Callable[[], Any]) -> tuple[np.ndarray, np.ndarray]:
    """What `build()` (which records and returns one tensor) gives on c and on the reference."""
    results = []
    for backend in ("c", "reference"):
        out: list[np.ndarray] = []
        Receiver(out.append, build())
        execute(backend=backend)
        results.append(out[0])
    return results[0], results[1]


def _windows(
    x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int]
) -> Any:
    return Tensor(emit(tg.WindowsOp(x.value, kernel, stride, pad)).result)


def test_windows_padding_of_an_elementwise_value_on_c() -> None:
    x = np.ones((1, 1, 4, 4), np.float32)

    def build() -> Any:
        y = Feeder(lambda: x, shape=[1, 1, 4, 4]) * 2.0
        return _windows(y, (3, 3), (1, 1), (1, 1)).sum((4, 5))

    c, reference = _c_and_reference(build)
    np.testing.assert_array_equal(c, reference)


def test_windows_gradient_on_c() -> None:
    r = np.array([1.0, 2.0], np.float32).reshape(1, 1, 1, 2)

    def build() -> Any:
        x = Parameter(np.zeros((1, 1, 2, 4), np.float32), name="x")
        mean = _windows(x, (2, 2), (2, 2), (0, 0)).sum((4, 5)) * 0.25
        (mean * gradfuse.constant(r)).sum().backward()
        return x.grad

    c, reference = _c_and_reference(build)
    np.testing.assert_array_equal(reference.ravel() * 4, [1, 1, 2, 2, 1, 1, 2, 2])
    np.testing.assert_array_equal(c, reference)


def test_pad_of_a_conv_then_windows_on_c() -> None:

    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 20.0

    def build() -> Any:
        w = Parameter(np.ones((1, 1, 1, 1), np.float32), name="w")
        y = conv2d(Feeder(lambda: x, shape=x.shape), w)  # y == x
        padded = emit(tg.PadOp(y.value, [0, 0, 1, 1], [0, 0, 1, 1], -np.inf)).result
        return _windows(Tensor(padded), (3, 3), (2, 2), (0, 0)).amax((4, 5))

    c, reference = _c_and_reference(build)
    np.testing.assert_array_equal(reference.ravel(), [-15, -13, -7, -5])
    np.testing.assert_array_equal(c, reference)


def test_conv2d_of_a_single_use_elementwise_value_on_c() -> None:
    x = np.ones((1, 1, 2, 2), np.float32)

    def build() -> Any:
        w = Parameter(np.ones((1, 1, 3, 3), np.float32), name="w")
        return conv2d(Feeder(lambda: x, shape=[1, 1, 2, 2]).relu(), w, padding=1)

    c, reference = _c_and_reference(build)
    np.testing.assert_array_equal(reference.ravel(), [4, 4, 4, 4])
    np.testing.assert_array_equal(c, reference)


def test_conv_transpose2d_of_a_single_use_elementwise_value_on_c() -> None:
    x = np.ones((1, 1, 2, 2), np.float32)

    def build() -> Any:
        w = Parameter(np.ones((1, 1, 2, 2), np.float32), name="w")
        return conv_transpose2d(Feeder(lambda: x, shape=[1, 1, 2, 2]).relu(), w, stride=2)

    c, reference = _c_and_reference(build)
    np.testing.assert_array_equal(reference, np.ones((1, 1, 4, 4)))
    np.testing.assert_array_equal(c, reference)
