"""Lane blocks (`gradfuse/backend/c/lanes.py`) on the C backend against the reference
interpreter and NumPy: a sum over three dims, one loop each, whose carried values vary
between lanes only through the innermost loop's yield; a packed contraction whose result
is stored transposed (which dim the lanes take, `pack.choose`)."""

from __future__ import annotations

import re

import numpy as np
from kernel_programs import kernel, load, main, parse, store  # tests/unit

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


# A weight gradient stored transposed, as autodiff leaves a Linear's (the forward reads
# its weight through a permute): g[k, j] = sum_i h[i / 7, i % 7, k] * dy[i, j] over the
# domain [j, k | i], the rows of h split as an LSTM's [time, batch] are.
H, DY, G = "memref<9x7x40xf32>", "memref<63x96xf32>", "memref<40x96xf32>"
WGRAD = main(
    f'  %h = kernel.param "h" : {H}\n  %dy = kernel.param "dy" : {DY}\n'
    f"  %g = kernel.alloc : {G}\n"
    + kernel(
        "wgrad", "contraction", [96, 40, 63], 2, [("%h", H), ("%dy", DY), ("%g", G)],
        load("%a", "%b0", "affine_map<(d0, d1, d2) -> (d2 floordiv 7, d2 mod 7, d1)>", H)
        + load("%c", "%b1", "affine_map<(d0, d1, d2) -> (d2, d0)>", DY)
        + '  %p = arith.mulf %a, %c : f32\n  %s = kernel.reduce "add" %p : f32\n'
        + store("%s", "%b2", "affine_map<(d0, d1) -> (d1, d0)>", G),
    )
    + f'  kernel.receive "g", %g : {G}\n  func.return'
)  # fmt: skip
LOWER = "kernel-plan-buffers,convert-kernel-to-gpu"


def test_a_gradient_stored_transposed_is_written_a_vector_at_a_time() -> None:
    """The lanes go along j, which the result is stored contiguously along, not along the
    domain's innermost k (each lane a row of g of its own: on an LSTM LM's 10000 x 200
    decoder gradient, 24 against 17 ms); h's rows are read without a division each."""
    module = parse(WGRAD)
    compile_module(module, "c", pipeline=LOWER)
    source = render_c(module)
    assert "for (long b = 0; b < 96; b += 16)" in source
    assert re.search(r"\[i1 \* 96 \+ \(b \+ l\)\] = gf_sum0", source)
    assert re.search(r"gf_w0 = &v\d+\[i1b \+ v\d+ \* 40\];", source)  # i / 7 * 280 + i % 7 * 40
    rng = np.random.default_rng(3)
    params = {
        "h": rng.standard_normal((9, 7, 40)).astype(np.float32),
        "dy": rng.standard_normal((63, 96)).astype(np.float32),
    }
    got = compile_module(parse(WGRAD), "c", pipeline=LOWER).run(params=params)
    h = params["h"].reshape(63, 40).astype(np.float64)
    dy = params["dy"].astype(np.float64)
    # 63 float32 products and sums: each at most 2^-24 relative, so |error| is at most
    # 64 * 2^-24 * sum_i |h[i, k] * dy[i, j]| (FMA or not, in any order of the lanes)
    bound = 64 * 2.0**-24 * (np.abs(h).T @ np.abs(dy))
    assert np.all(np.abs(got.received["g"][0] - h.T @ dy) <= bound)
