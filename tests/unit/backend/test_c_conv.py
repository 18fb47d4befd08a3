"""Convolutions on the C backend against the reference interpreter: the packed lane
blocks (`gradfuse/backend/c/pack.py`), their sums in vector registers (`vector.py`) and
the rows of zeros that the sums skip, forward and backward, for the shapes DCGAN and
ResNet train with (stride 2 and padding 1, transposed, 1x1 with stride 2, a partial block
of lanes, 8x8 and 4x4 images, one channel), in float32 and float64."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import gradfuse
from gradfuse import Parameter, Receiver, Tensor, execute
from gradfuse.backend import PIPELINE_OF
from gradfuse.backend.c import pack
from gradfuse.backend.c.host import render_c
from gradfuse.frontend.recorder import program
from gradfuse.nn import Conv2d, ConvTranspose2d, Module
from gradfuse.passes import run_pipeline

Case = tuple[Callable[[], Module], tuple[int, ...]]
CASES: dict[str, Case] = {
    "conv-4x4-stride2-pad1": (lambda: Conv2d(8, 16, 4, 2, 1, bias=False), (2, 8, 32, 32)),
    "convT-4x4-stride2-pad1": (lambda: ConvTranspose2d(16, 8, 4, 2, 1, bias=False), (2, 16, 8, 8)),
    "convT-to-8x8": (lambda: ConvTranspose2d(16, 8, 4, 2, 1, bias=False), (2, 16, 4, 4)),
    "conv-1x1-stride2": (lambda: Conv2d(8, 16, 1, 2, 0, bias=False), (2, 8, 8, 8)),
    "conv-3x3-partial-block": (lambda: Conv2d(3, 16, 3, 1, 1), (2, 3, 20, 20)),
    "conv-to-4x4": (lambda: Conv2d(16, 32, 4, 2, 1, bias=False), (2, 16, 8, 8)),
    "convT-to-1-channel": (lambda: ConvTranspose2d(8, 1, 4, 2, 1, bias=False), (2, 8, 16, 16)),
    "conv-from-1-channel": (lambda: Conv2d(1, 8, 4, 2, 1, bias=False), (2, 1, 32, 32)),
}
SUBS = {"convT-to-8x8", "conv-to-4x4"}  # rows of 8x8 and 4x4 images hold several blocks
ALONE = {"convT-to-1-channel"}  # one output channel: no dim shares the pack


def record(make: Callable[[], Module], shape: tuple[int, ...], dtype: type) -> list[np.ndarray]:
    """Records `sum(model(x) * r) + sum(x * s)` and its backward; returns the list that a
    receiver fills with the output and the gradients of x and of the parameters."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    rng = np.random.default_rng(0)
    model = make()
    for p in model.parameters():
        p.data = rng.normal(0, 0.2, p.shape).astype(dtype)
    x = np.maximum(rng.normal(size=shape), 0).astype(dtype)  # ReLU-like: half zeros
    x[:, 0, : shape[2] // 2] = 0  # image rows of zeros: rows of the pack that the sums skip
    xp = Parameter(x, name="input")
    out = model(xp)
    r = rng.normal(size=tuple(out.shape)).astype(dtype)
    s = rng.normal(size=shape).astype(dtype)  # x's gradient adds s where the conv's is 0
    (
        (out * gradfuse.constant(r, dtype)).sum() + (xp * gradfuse.constant(s, dtype)).sum()
    ).backward()
    got: list[np.ndarray] = []
    grads = [xp.grad, *(p.grad for p in model.parameters() if p.grad is not None)]
    Receiver(lambda *v: got.extend(v), [out, *grads], name="grads")  # type: ignore[operator]
    return got


def c_source(make: Callable[[], Module], shape: tuple[int, ...], dtype: type) -> str:
    record(make, shape, dtype)
    module = program().module.clone()
    run_pipeline(module, PIPELINE_OF["c"])
    return render_c(module)


@pytest.mark.parametrize("name", sorted(CASES))
def test_packed_convolutions_match_the_reference_in_float32(name: str) -> None:
    make, shape = CASES[name]
    source = c_source(make, shape, np.float32)
    assert "gf_rows" in source and "gf_v" in source  # packed, sparse and in vectors
    assert "gf_sub" in source or name not in SUBS
    alone = re.search(r"typedef float gf_v[^\n]*\n    gf_v a0_0_0 =", source)  # no loop over j
    assert alone or name not in ALONE
    results = {}
    for backend in ("c", "reference"):
        got = record(make, shape, np.float32)
        execute(backend=backend)
        results[backend] = got
    assert len(results["c"]) == len(results["reference"]) >= 3
    for got, want in zip(results["c"], results["reference"], strict=True):
        assert got.shape == want.shape and np.abs(want).max() > 0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class Twice(Module):
    """A convolution applied to x and to x / 2: its weight gradient adds both, one sum
    over kernel taps x channels, whose lanes go along the taps (the bounds tests stay
    in the pack, not in each output channel's sums)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = Conv2d(8, 16, 4, 2, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x) + self.conv(x * 0.5)


def test_weight_gradients_take_their_lanes_along_the_kernel_taps(monkeypatch) -> None:
    lanes: list[tuple[int, int]] = []
    choose = pack.choose

    def spy(seg, ops):  # type: ignore[no-untyped-def]
        chosen = choose(seg, ops)
        if chosen is not None:
            lanes.append((chosen[0].lane, len(seg.dims)))
        return chosen

    monkeypatch.setattr(pack, "choose", spy)
    c_source(Twice, (2, 8, 16, 16), np.float32)
    assert (0, 2) in lanes  # (taps, output channels): lanes along dim 0, the taps
    results = {}
    for backend in ("c", "reference"):
        got = record(Twice, (2, 8, 16, 16), np.float32)
        execute(backend=backend)
        results[backend] = got
    for got, want in zip(results["c"], results["reference"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_packed_convolutions_in_float64_sum_in_lane_arrays() -> None:
    make, shape = CASES["convT-4x4-stride2-pad1"]
    source = c_source(make, shape, np.float64)
    assert "double* v" in source and "p = (double*)" in source  # packed, not in vectors
    assert "gf_v" not in source and "gf_rows" not in source
    results = {}
    for backend in ("c", "reference"):
        got = record(make, shape, np.float64)
        execute(backend=backend)
        results[backend] = got
    for got, want in zip(results["c"], results["reference"], strict=True):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
