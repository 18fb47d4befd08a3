"""The `cuda` pipeline's programs on a CUDA device against the reference interpreter, to
1e-5 (a convolution: to float32's error bound, against float64): the examples, random
fused programs, shared-memory tiled contractions, row-by-row launches and reductions by
whole blocks. On the emulated device (`cuda-emu`) in `make test`, on the GPU in `make
test-gpu` (tests/gpu/conftest.py).

`GRADFUSE_GPU_TESTS_ON=lowered pytest tests/gpu/test_cuda_programs.py` runs the small
ones on the lowered interpreter instead (the block's threads in lockstep between
barriers).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from device_under_test import BACKEND_MARKS, ON
from hypothesis import given, settings

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "backend"))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "passes"))
import compiled  # noqa: E402
from fusion_programs import programs  # noqa: E402

from gradfuse.backend import compile_module  # noqa: E402
from gradfuse.backend.interpreters.tg import run  # noqa: E402
from gradfuse.frontend.parser import parse_tg  # noqa: E402

DRY = ON == "lowered"
pytestmark = BACKEND_MARKS


def agree(src: str, **run: object) -> None:
    """The program on the GPU (pipeline `cuda`) and on the reference, to 1e-5."""
    compiled.agree(src, ON, pipeline="cuda", **run)


RNG = np.random.default_rng(0)


def test_linear_regression_example():
    feeders = dict(np.load(ROOT / "examples" / "linreg.npz"))
    agree((ROOT / "examples" / "linreg.tg").read_text(), feeders=feeders)


@pytest.mark.skipif(DRY, reason="too large for the lowered interpreter")
def test_examples_mlp():
    """examples/mlp.py as a user runs it (GRADFUSE_BACKEND=cuda): its checksum, the
    reference's to 1e-5."""
    from test_examples_c import checksum

    assert checksum(ON) == pytest.approx(checksum("reference"), rel=1e-5)


@pytest.mark.skipif(DRY, reason="too large for the lowered interpreter")
def test_examples_transformer():
    """examples/transformer.py trained 4 steps on the device: the reference's losses and params."""
    from test_examples_c import transformer_matches_the_reference

    transformer_matches_the_reference(ON)


@settings(max_examples=10, deadline=None)
@given(programs())
def test_random_fused_programs(src: str):
    line = next(ln for ln in src.splitlines() if "tg.feeder" in ln)
    shape = tuple(int(d) for d in line.split("tensor<")[1].split("xf32")[0].split("x"))
    xs = RNG.standard_normal((4, *shape)).astype(np.float32) * 0.5
    agree(src, feeders={"x": xs})


# 20x18 outputs, 20-long reduction: a 16x16 tile and the edges of three more
MATMUL = """
func @main(%x: tensor<20x20xf32>, %w: tensor<18x20xf32>, %b: tensor<18xf32>) -> (tensor<20x18xf32>) {
  %wt = tg.view %w map=affine_map<(d0, d1) -> (d1, d0)> : tensor<20x18xf32>
  %y = tg.dot %x, %wt : tensor<20x18xf32>
  %bb = tg.view %b map=affine_map<(d0, d1) -> (d1)> : tensor<20x18xf32>
  %z = tg.add %y, %bb : tensor<20x18xf32>
  %r = tg.relu %z : tensor<20x18xf32>
  return %r
}
"""
CONV = """
func @main(%x: tensor<1x3x18x18xf32>, %w: tensor<16x3x3x3xf32>) -> (tensor<1x16x16x16xf32>) {
  %y = tg.conv2d %x, %w stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<1x16x18x18xf32>
  %s = tg.slice %y starts=[0, 0, 0, 0] limits=[1, 16, 16, 16] strides=[1, 1, 1, 1] : tensor<1x16x16x16xf32>
  return %s
}
"""
SOFTMAX = """
func @main(%x: tensor<4x40xf32>) -> (tensor<4x40xf32>) {
  %p = tg.softmax %x dim=1 : tensor<4x40xf32>
  return %p
}
"""


def test_a_tiled_matmul_with_its_epilogue():
    args = [RNG.standard_normal(s).astype(np.float32) for s in [(20, 20), (18, 20), (18,)]]
    agree(MATMUL, args=args)


@pytest.mark.skipif(DRY, reason="too large for the lowered interpreter")
def test_a_tiled_padded_convolution():
    """Against the reference's float64 run, within the float32 error bound of a sum of n
    products in any order, with or without FMA: gamma_n = n u / (1 - n u) times the sum
    of the products' magnitudes, n = 27 (3 channels x 3 x 3 taps; fewer at the padding).
    Draws from 12 seeds came within 0.12 of it on the emulated device; to 1e-5 of the
    float32 reference they came within 0.88 of that tolerance, and past it for other
    draws."""
    args = [RNG.standard_normal(s).astype(np.float32) for s in [(1, 3, 18, 18), (16, 3, 3, 3)]]
    (got,) = compile_module(parse_tg(CONV), ON, pipeline="cuda").run(args=args).results

    def exact(xs: list[np.ndarray]) -> np.ndarray:
        return run(
            parse_tg(CONV), args=[a.astype(np.float64) for a in xs], dtype=np.float64
        ).results[0]

    gamma = 27 * 2.0**-24 / (1 - 27 * 2.0**-24)
    bound = gamma * exact([np.abs(a) for a in args])
    assert np.all(np.abs(got - exact(args)) <= bound)


def test_a_row_by_row_softmax():
    agree(SOFTMAX, args=[RNG.standard_normal((4, 40)).astype(np.float32)])


def test_long_reductions_by_whole_blocks():
    """A softmax over 300 columns and column sums over 520 rows (block_reduce); positive
    columns, so that the sums' relative error is the summation order's, not cancellation's."""
    rng = np.random.default_rng(7)
    agree(SOFTMAX.replace("40x", "300x"), args=[rng.standard_normal((4, 300)).astype(np.float32)])
    columns = (
        "func @main(%x: tensor<520x8xf32>) -> (tensor<8xf32>) {\n"
        "  %s = tg.reduce_sum %x dims=[0] : tensor<8xf32>\n  return %s\n}\n"
    )
    agree(columns, args=[rng.random((520, 8), dtype=np.float32)])
