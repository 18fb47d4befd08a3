"""Lane blocks (`gradfuse/backend/c/lanes.py`) on the C backend against the reference
interpreter: a sum over three dims, one loop each, whose carried values vary between
lanes only through the innermost loop's yield."""

from __future__ import annotations

import numpy as np

from gradfuse.backend import compile_module
from gradfuse.backend.c.host import render_c
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

COLUMN_SUMS = """
func @main(%x: tensor<2x3x4x37xf32>) -> (tensor<37xf32>) {
  %s = tg.reduce_sum %x dims=[0, 1, 2] : tensor<37xf32>
  return %s
}
"""


def test_sums_over_three_loops_carry_lane_arrays() -> None:
    module = parse_tg(COLUMN_SUMS)
    run_pipeline(module, "default")
    source = render_c(module)
    assert "b += 16" in source  # 37 columns: blocks of lanes
    assert source.count("[16];") >= 3  # one lane array per level of the nest
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 37)).astype(np.float32)
    got = compile_module(parse_tg(COLUMN_SUMS), "c").run(args=[x]).results[0]
    want = compile_module(parse_tg(COLUMN_SUMS), "reference").run(args=[x]).results[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, x.sum(axis=(0, 1, 2)), rtol=1e-5, atol=1e-5)
