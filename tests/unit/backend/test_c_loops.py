"""The c backend on the `cpu` pipeline (`convert-kernel-to-loops` and the `loops-*`
passes) against the reference interpreter: the c backend's program corpus, random
fused programs, and nests whose innermost dim runs in vector lanes with a scalar
remainder; `GRADFUSE_C_PIPELINE` gives the pipeline options."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from compiled import agree  # tests/unit
from hypothesis import given, settings

from gradfuse.backend import compile_module
from gradfuse.backend.c.host import render_c, render_program, split_units
from gradfuse.backend.c.lanes import host_lanes
from gradfuse.backend.interpreters.tg import run
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import expand, run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_c_backend import PROGRAMS, inputs, random_feeders  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
from fusion_programs import programs  # noqa: E402

LANES = """
func @main(%x: tensor<3x37xf32>, %w: tensor<37x45xf32>, %b: tensor<45xf32>) -> (tensor<3x45xf32>, tensor<45xf32>) {
  %h = tg.dot %x, %w : tensor<3x45xf32>
  %br = tg.reshape %b : tensor<1x45xf32>
  %bb = tg.broadcast %br : tensor<3x45xf32>
  %y = tg.add %h, %bb : tensor<3x45xf32>
  %e = tg.exp2 %y : tensor<3x45xf32>
  %c = tg.reduce_sum %e dims=[0] : tensor<45xf32>
  return %y, %c
}
"""

BLOCKS = """
func @main(%x: tensor<4x11x16xf32>, %w: tensor<64x37xf32>, %v: tensor<37x21xf32>) -> (tensor<11x21xf32>, tensor<64x37xf32>) {
  %p = tg.permute %x perm=[1, 0, 2] : tensor<11x4x16xf32>
  %r = tg.reshape %p : tensor<11x64xf32>
  %h = tg.dot %r, %w : tensor<11x37xf32>
  %m = tg.reduce_max %h dims=[1] : tensor<11xf32>
  %mr = tg.reshape %m : tensor<11x1xf32>
  %mb = tg.broadcast %mr : tensor<11x37xf32>
  %d = tg.sub %h, %mb : tensor<11x37xf32>
  %o = tg.dot %d, %v : tensor<11x21xf32>
  %rt = tg.permute %r perm=[1, 0] : tensor<64x11xf32>
  %g = tg.dot %rt, %d : tensor<64x37xf32>
  return %o, %g
}
"""
"""Heads split from a flat axis (`kernel-split-dims`), rows whose phases share weights
(`loops-distribute`), register blocks with remainders in every dim (`loops-unroll-jam`:
11 rows, 37 and 21 outputs)."""

CONV_ROWS = """
func @main(%x: tensor<2x1x16x16xf32>, %w: tensor<16x1x4x4xf32>, %z: tensor<2x16x8x8xf32>) -> (tensor<2x16x8x8xf32>, tensor<2x16x8x8xf32>) {
  %m = tg.reduce_max %z dims=[3] : tensor<2x16x8xf32>
  %mr = tg.reshape %m : tensor<2x16x8x1xf32>
  %mb = tg.broadcast %mr : tensor<2x16x8x8xf32>
  %d = tg.sub %z, %mb : tensor<2x16x8x8xf32>
  %y = tg.conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x16x8x8xf32>
  %l = tg.relu %y : tensor<2x16x8x8xf32>
  return %d, %l
}
"""
"""A one-channel convolution in a row nest over [b, co, oh] beside a row max (as
DCGAN's first convolution beside a batch norm): `loops-distribute` splits it out, its
weight shared by the rows of one output channel, and its 4 x 4 taps, too few for a dot
product in lanes, leave the lanes to the 16 output channels."""

MASKS = """
func @main(%x: tensor<5x45xf32>, %w: tensor<45x43xf32>, %g: tensor<5x43xf32>, %keep: tensor<5x43xi1>) -> (tensor<5x43xf32>, tensor<5x43xf32>) {
  %h = tg.dot %x, %w : tensor<5x43xf32>
  %m = tg.cmplt %g, %h : tensor<5x43xi1>
  %s = tg.where %m, %h, %g : tensor<5x43xf32>
  %t = tg.where %keep, %h, %g : tensor<5x43xf32>
  return %s, %t
}
"""
"""Masks in lanes: a comparison of lane sums (`lanes.cmpf`), a mask read from an i1
buffer, and choices by both (`lanes.select`, ReLU's gradient), 43 outputs: 5 vectors of
8 and a scalar remainder of 3. Against a float64 run the c and reference results are
within 0.044 of `agree`'s tolerance, and the comparison's closest pair is 2.9e-3 apart,
far beyond a 45-term float32 sum's rounding: every CPU chooses the same lanes."""


JAM_ALL = "cpu{jam-work=0}"
"""The `cpu` pipeline with register blocks for nests of any size: these programs are
small, and below `loops-unroll-jam`'s `min-work` their nests would stay unjammed."""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_cpu_pipeline_matches_the_reference(name):
    agree(PROGRAMS[name], "c", pipeline=JAM_ALL, **inputs(name))


@settings(max_examples=10, deadline=None)
@given(programs())
def test_random_programs_on_the_cpu_pipeline_match_the_reference(src: str):
    agree(src, "c", pipeline=JAM_ALL, feeders=random_feeders(src))


def test_lanes_and_their_scalar_remainder_match_the_reference():
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((3, 37), (37, 45), (45,))]
    agree(LANES, "c", pipeline=JAM_ALL, args=args)
    program = compile_module(parse_tg(LANES), "c", pipeline=JAM_ALL)
    source = render_c(program.module)
    assert "gf_floatx16 " in source or "gf_floatx8 " in source  # lanes
    assert re.search(r"for \(long d1 = 0; d1 < 32; d1 \+= 16\)", source)  # 2 vectors jammed
    assert re.search(r"for \(long d1 = 40; d1 < 45; d1 \+= 5\)", source)  # the remainder, jammed
    assert "/ (unsigned long)" not in source and "grid" not in source  # no thread grid


def test_split_distributed_and_jammed_nests_match_the_reference():
    rng = np.random.default_rng(5)
    shapes = ((4, 11, 16), (64, 37), (37, 21))
    args = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in shapes]
    agree(BLOCKS, "c", pipeline=JAM_ALL, args=args)
    source = render_c(compile_module(parse_tg(BLOCKS), "c", pipeline=JAM_ALL).module)
    assert "(unsigned long)" not in source  # the heads are dims of their own
    assert re.search(r"for \(long d0 = 0; d0 < 8; d0 \+= 8\)", source)  # 8 rows jammed
    assert re.search(r"for \(long d0 = 8; d0 < 11; d0 \+= 3\)", source)  # the other 3 jammed


def test_a_convolution_in_a_row_nest_is_distributed_and_matches_the_reference():
    rng = np.random.default_rng(11)
    shapes = ((2, 1, 16, 16), (16, 1, 4, 4), (2, 16, 8, 8))
    args = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in shapes]
    agree(CONV_ROWS, "c", pipeline=JAM_ALL, args=args)
    source = render_c(compile_module(parse_tg(CONV_ROWS), "c", pipeline=JAM_ALL).module)
    assert "omp simd reduction(+" not in source  # no 4-tap dot product
    nest = "for (long d2 = 0; d2 < 8; d2++)\n  for (long d3 = 0; d3 < 8; d3 += 8)\n  for (long d1"
    assert nest in source  # the convolution's own nest over all rows, channels innermost


def test_masks_in_lanes_match_the_reference():
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((5, 45), (45, 43), (5, 43))]
    args.append(rng.random((5, 43)) < 0.5)
    agree(MASKS, "c", pipeline=JAM_ALL, args=args)
    program = compile_module(parse_tg(MASKS), "c", pipeline=JAM_ALL)
    ir = str(program.module)
    assert "lanes.cmpf olt" in ir and "lanes.select" in ir
    assert re.search(r"vector.load %\d+\[.*\] : memref<5x43xi1>, vector<8xi1>", ir)  # a mask read
    source = render_c(program.module)
    assert re.search(r"gf_floatx8 v\d+ = gf_selectx8\(v\d+, v\d+, v\d+\);", source)
    assert re.search(r"for \(long d1 = 40; d1 < 43; ", source)  # the scalar remainder


LANE_TESTS = """
func @main(%x: tensor<4x40xf32>, %y: tensor<4x40xf32>) -> (tensor<4x40xi1>, tensor<4x40xi1>, tensor<4x40xf32>, tensor<4x40xf32>) {
  %lt = tg.cmplt %x, %y : tensor<4x40xi1>
  %gt = tg.cmplt %y, %x : tensor<4x40xi1>
  %s = tg.where %lt, %x, %y : tensor<4x40xf32>
  %m = tg.max %x, %y : tensor<4x40xf32>
  return %lt, %gt, %s, %m
}
"""


def test_comparisons_selects_and_maxima_in_lanes_are_exact_at_special_values():
    """Comparisons, selects and maxima of whole vectors (`gf_selectx8`, `gf_fmaxfx8`, a
    comparison's -1 lanes stored as the byte 1) give what the scalar code gives, bit for
    bit: NaN compares false, max as fmaxf (a NaN operand gives the other), -0.0 not
    below 0.0, infinities ordered."""
    rng = np.random.default_rng(3)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38], np.float32)
    x = rng.choice(special, (4, 40)).astype(np.float32)
    y = rng.choice(special, (4, 40)).astype(np.float32)
    x[0, :8], y[0, :8] = special, special[::-1]
    program = compile_module(parse_tg(LANE_TESTS), "c", pipeline="cpu")
    source = render_c(program.module)
    assert "gf_selectx8(" in source and "gf_fmaxfx8(" in source
    assert "for (int l = 0" not in source  # no op left lane by lane
    lt, gt, s, m = program.run(args=[x, y]).results
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(lt, x < y)
        np.testing.assert_array_equal(gt, x > y)
        assert lt.view(np.uint8).max() == 1 and gt.view(np.uint8).max() == 1  # bytes 0, 1
        np.testing.assert_array_equal(s.view(np.uint32), np.where(x < y, x, y).view(np.uint32))
        fmaxf = np.where((y > x) | np.isnan(x), y, x)  # gf_fmaxf(x, y): +0.0 for (0.0, -0.0)
        np.testing.assert_array_equal(m.view(np.uint32), fmaxf.view(np.uint32))
    scalar_spec = ",".join(p for p in expand("cpu").split(",") if p != "loops-vectorize")
    scalar = compile_module(parse_tg(LANE_TESTS), "c", pipeline=scalar_spec).run(args=[x, y])
    for got, want in zip((lt, gt, s, m), scalar.results):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_program_built_in_several_units_has_the_vector_types_in_each():
    program = compile_module(parse_tg(PROGRAMS["mlp"]), "c", pipeline="cpu")
    host = render_program(program.module)
    assert len(host.kernel_texts) >= 2
    *kernels, main = split_units(host, len(host.kernel_texts))
    assert len(kernels) >= 2
    for unit in [*kernels, main]:
        assert "typedef float gf_floatx8 " in unit
    assert any("gf_floatx8 v" in unit for unit in kernels)  # the lanes are used


def test_units_are_balanced_by_source_size_and_hold_each_kernel_once():
    """Kernels are dealt out largest first to the unit with the least source: no two
    units differ by more than the largest kernel, whatever the kernels' order."""
    program = compile_module(parse_tg(PROGRAMS["linreg"]), "c", pipeline="cpu")
    host = render_program(program.module)
    host.kernel_texts = texts = sorted(host.kernel_texts, key=len, reverse=True)
    assert len(texts) >= 3 and len({len(t) for t in texts}) >= 3  # halves would be uneven
    *units, _ = split_units(host, 2)
    assert len(units) == 2
    bodies = [t.split("{", 1)[1] for t in texts]
    assert all(sum(unit.count(b) for unit in units) == 1 for b in bodies)
    sizes = [sum(len(t) for t, b in zip(texts, bodies) if b in unit) for unit in units]
    assert abs(sizes[0] - sizes[1]) <= max(len(t) for t in texts)
    order = [[k for k, b in enumerate(bodies) if b in unit] for unit in units]
    assert all(o == sorted(o) for o in order)  # program order within a unit


def test_the_c_pipeline_is_cpu_and_the_environment_gives_its_options(monkeypatch):
    monkeypatch.delenv("GRADFUSE_C_PIPELINE", raising=False)
    program = compile_module(parse_tg(PROGRAMS["conv"]), "c")
    assert "gradfuse.kernel" in str(program.module)  # kernel functions of loop nests
    for name in ("fast", "default"):  # `default`'s GPU grids have no c target
        monkeypatch.setenv("GRADFUSE_C_PIPELINE", name)
        with pytest.raises(
            GradfuseError,
            match=f'"{name}" is not a pipeline of the c backend \\(choose from cpu\\)',
        ):
            compile_module(parse_tg(PROGRAMS["conv"]), "c")
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{jam-work=0 lanes=8}")  # pipeline options
    assert "vector<8xf32>, vector<8xf32>" in str(compile_module(parse_tg(LANES), "c").module)
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{jam-work=0}")  # lanes: this machine's
    wide = f"vector<{host_lanes()}xf32>, vector<{host_lanes()}xf32>"
    assert wide in str(compile_module(parse_tg(LANES), "c").module)
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{tile-rows=4}")
    with pytest.raises(GradfuseError, match="pipeline cpu has no option 'tile-rows=4'"):
        compile_module(parse_tg(PROGRAMS["conv"]), "c")


def test_a_weight_gradient_stored_for_its_update_matches_float64():
    """kernel-layout's case (tests/filecheck/passes/kernel-layout.tg): momentum SGD on
    a convolution's weight, its gradient stored [1, O, C*KH*KW]. Against the reference
    interpreter's float64 run, the momentum of the c backend was at most 1.5e-6 off
    and the float32 reference's 6.7e-7. Each gradient is a float32 sum of 72 products whose magnitudes add up to about 12: its
    rounding errors, of random sign, come to about 6e-8 * 12 ~ 1e-6 in any order of
    summation (the worst case, 72 * 6e-8 * 12 = 5e-5, needs every rounding one way);
    atol 1e-5 is 7x the largest seen. The weights, 0.5 - 0.01 * m, differ by their
    float32 rounding (6e-8)."""
    src = Path(__file__).resolve().parents[2] / "filecheck/passes/kernel-layout.tg"
    program = src.read_text().split("// -----")[0]
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((2, 2, 4, 6, 6)) * 0.5).astype(np.float32)
    t = (rng.standard_normal((2, 2, 8, 6, 6)) * 0.5).astype(np.float32)
    exact = parse_tg(program)
    run_pipeline(exact, "tg")
    want = run(exact, feeders={"x": x, "t": t}, dtype=np.float64).params
    m, w = want["m"], want["w"]
    compiled = compile_module(parse_tg(program), "c", pipeline="cpu")
    assert "memref<1x8x36xf32>" in str(compiled.module)  # the gradient, [1, O, C*KH*KW]
    for backend, pipeline in (("c", "cpu"), ("reference", None)):
        got = compile_module(parse_tg(program), backend, pipeline=pipeline)
        params = got.run(feeders={"x": x, "t": t}).params
        np.testing.assert_allclose(params["m"], m, rtol=0, atol=1e-5)
        np.testing.assert_allclose(params["w"], w, rtol=0, atol=1e-6)


def test_coalesced_elementwise_nests_match_the_reference():
    """loops-coalesce's cases (tests/filecheck/passes/loops-coalesce.tg): a weight's
    update over [128, 64, 4, 4] made one dim of 131072 points in lanes, taps made one
    dim of 9 (8 in lanes, 1 after), a momentum update whose gradient is read by a flat
    index, and a transposing copy left as it was. Each point
    is a product, square root or quotient of its own elements, correctly rounded in
    lanes as in NumPy: `agree`'s tolerance holds on any CPU."""
    src = Path(__file__).resolve().parents[2] / "filecheck/passes/loops-coalesce.tg"
    update, taps, flat, transposed = src.read_text().split("// -----")
    rng = np.random.default_rng(19)
    m = np.abs(rng.standard_normal((128, 64, 4, 4))).astype(np.float32) + 0.1
    g = rng.standard_normal((128, 64, 4, 4)).astype(np.float32)
    agree(update, "c", pipeline="cpu", args=[m, g, np.float32(0.01)])
    x, s = (rng.standard_normal(shape).astype(np.float32) for shape in ((32, 16, 3, 3), (32, 16)))
    agree(taps, "c", pipeline="cpu", args=[x, s])
    w, b = (rng.standard_normal((32, 16, 3, 3)).astype(np.float32) for _ in range(2))
    g = rng.standard_normal((32, 144)).astype(np.float32)
    agree(flat, "c", pipeline="cpu", args=[w, b, g])
    t = np.abs(rng.standard_normal((64, 4, 32))).astype(np.float32)
    agree(transposed, "c", pipeline="cpu", args=[t])
    source = render_c(compile_module(parse_tg(update), "c", pipeline="cpu").module)
    assert re.search(r"for \(long d0 = 0; d0 < 131072; d0 \+= (8|16)\)", source)


def test_a_max_pool_gradient_split_by_phase_matches_the_reference():
    """A 3 x 3 max pool of stride 2 (ResNet-18's): its input gradient, split by phase
    with its 3 taps padded to 4 (`kernel-split-phases`), sums 1 to 4 window slots an
    input, its tap loops bounded by the phase and the image (`loops-trim-taps`); random
    normal inputs tie in no window."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
    from test_split_phases import MAX_POOL_GRAD

    rng = np.random.default_rng(17)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 8, 8), (2, 3, 4, 4))]
    agree(MAX_POOL_GRAD, "c", pipeline="cpu", args=args)
    source = render_c(compile_module(parse_tg(MAX_POOL_GRAD), "c", pipeline="cpu").module)
    assert source.count("gf_floordiv(") == 3  # its definition, and a bound a tap loop
    assert re.search(r"for \(long d6 = v\d+; d6 < v\d+; d6\+\+\)", source)
