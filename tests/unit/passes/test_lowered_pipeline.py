"""End to end: tg programs fused, lowered to gpu/scf/memref and interpreted equal the reference."""

from __future__ import annotations

import numpy as np
from fusion_programs import programs
from hypothesis import given, settings

from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.backend.interpreters.tg import RunResult, run
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import PIPELINES, expand, run_pipeline
from gradfuse.stats import kernel_stats

REFERENCE = "tg" if "tg" in PIPELINES else "default"
"""The pipeline whose output the reference interpreter runs (differentiated tg)."""
LOWER = (
    "default"
    if "convert-kernel-to-gpu" in expand("default")
    else "default,tg-lower-access,cse,dce,tg-fuse,convert-tg-to-kernel,convert-kernel-to-gpu"
)
"""The pipeline down to gpu/scf/memref IR."""

LINREG = """
func @main() -> (tensor<4x1xf32>) {
  %lr = tg.constant -0.2 : tensor<4x1xf32>
  tg.for %i = 0 to 3 step 1 {
    %x = tg.feeder "x" : tensor<8x4xf32>
    %y = tg.feeder "y" : tensor<8x1xf32>
    %w = tg.param "w" init=0.0 : tensor<4x1xf32>
    %p = tg.dot %x, %w : tensor<8x1xf32>
    %e = tg.sub %p, %y : tensor<8x1xf32>
    %e2 = tg.mul %e, %e : tensor<8x1xf32>
    %loss = tg.reduce_sum %e2 dims=[0, 1] : tensor<f32>
    tg.receiver "loss", %loss
    %g = tg.grad %loss wrt %w : tensor<4x1xf32>
    %d = tg.mul %g, %lr : tensor<4x1xf32>
    %w2 = tg.add %w, %d : tensor<4x1xf32>
    tg.assign "w", %w2
    tg.yield
  }
  %wf = tg.param "w" : tensor<4x1xf32>
  return %wf
}
"""


def both(src: str, feeders: dict[str, np.ndarray]) -> tuple[RunResult, RunResult]:
    ref = parse_tg(src)
    run_pipeline(ref, REFERENCE)
    low = parse_tg(src)
    run_pipeline(low, LOWER)
    return run(ref, feeders=feeders), run_lowered(low, feeders=feeders)


def close(got: RunResult, want: RunResult, rtol: float = 2e-4) -> None:
    for a, b in zip(got.results, want.results, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-5)
    assert got.received.keys() == want.received.keys()
    for key, calls in want.received.items():
        assert len(got.received[key]) == len(calls)
        for g, w in zip(got.received[key], calls):
            for a, b in zip(g, w, strict=True):
                np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-5, err_msg=key)
    for key, value in want.params.items():
        np.testing.assert_allclose(got.params[key], value, rtol=rtol, atol=1e-5, err_msg=key)


def test_linear_regression_training_loop() -> None:
    rng = np.random.default_rng(0)
    feeders = {
        "x": rng.standard_normal((3, 8, 4)).astype(np.float32),
        "y": rng.standard_normal((3, 8, 1)).astype(np.float32),
    }
    ref, low = both(LINREG, feeders)
    close(low, ref)
    module = parse_tg(LINREG)
    run_pipeline(module, LOWER)
    stats = kernel_stats(module)
    assert stats.launches == 3 * stats.kernels_per_iteration and stats.peak_bytes > 0


# p0 = p0 - (p0 @ p0) * p0 in place: the contraction reads p0 at other indices than
# the one each thread writes, so writing p0 in the same kernel races on a GPU.
RACE = """
func @main() {
  tg.for %i = 0 to 2 step 1 {
    %p0 = tg.param "p0" init=0.4 : tensor<3x3xf32>
    %v0 = tg.dot %p0, %p0 : tensor<3x3xf32>
    %v2 = tg.mul %v0, %p0 : tensor<3x3xf32>
    %v3 = tg.sub %p0, %v2 : tensor<3x3xf32>
    tg.assign "p0", %v3
    tg.receiver "out", %v3
    tg.yield
  }
  return
}
"""


def test_in_place_update_of_a_value_read_elsewhere_does_not_race() -> None:
    ref, low = both(RACE, {})
    close(low, ref)


@settings(max_examples=15, deadline=None)
@given(programs())
def test_random_programs_match_the_reference(src: str) -> None:
    line = next(ln for ln in src.splitlines() if "tg.feeder" in ln)
    shape = tuple(int(d) for d in line.split("tensor<")[1].split("xf32")[0].split("x"))
    xs = np.random.default_rng(2).standard_normal((8, *shape)).astype(np.float32) * 0.5
    ref, low = both(src, {"x": xs})
    close(low, ref)
