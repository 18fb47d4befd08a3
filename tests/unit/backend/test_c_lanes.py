"""The vector width of the c backend: `loops-vectorize{lanes=16}` against the reference
and against 8 lanes, and the probe that chooses the width for this machine
(`gradfuse.backend.c.lanes`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from compiled import agree  # tests/unit
from xdsl.dialects.builtin import i1

from gradfuse.backend import compile_module, pipeline_of
from gradfuse.backend.c import lanes
from gradfuse.backend.c.host import render_c
from gradfuse.frontend.parser import parse_tg
from gradfuse.frontend.recorder import program
from gradfuse.nn import Conv2d, ConvTranspose2d
from gradfuse.passes import expand

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_c_loops import BLOCKS, LANES, MASKS  # noqa: E402
from test_c_loops_conv import assert_matches_float64, record  # noqa: E402


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("name", ["LANES", "BLOCKS", "MASKS"])
def test_programs_in_lanes_of_either_width_match_the_reference(name, width):
    """Each output's sum runs in the same order at either width (the lanes run across
    outputs): over seeds 0-9 the worst error is 0.475 of `agree`'s tolerance for BLOCKS,
    0.014 for LANES and 0 for MASKS, at 8 and at 16 lanes alike."""
    src = {"LANES": LANES, "BLOCKS": BLOCKS, "MASKS": MASKS}[name]
    rng = np.random.default_rng(5)
    types = [a.type for a in parse_tg(src).ops.first.body.block.args]
    args = [
        rng.random(t.get_shape()) < 0.5  # MASKS' i1 mask
        if t.element_type == i1
        else rng.standard_normal(t.get_shape()).astype(np.float32) * 0.3
        for t in types
    ]
    pipeline = f"cpu{{jam-work=0 lanes={width}}}"
    agree(src, "c", pipeline=pipeline, args=args)
    source = render_c(compile_module(parse_tg(src), "c", pipeline=pipeline).module)
    assert f"gf_floatx{width} v" in source  # vectors of `width` lanes are used
    if width == 8:
        assert "gf_floatx16 v" not in source


def test_sixteen_lanes_step_by_16_and_leave_a_scalar_remainder():
    module = compile_module(parse_tg(LANES), "c", pipeline="cpu{lanes=16}").module
    assert "vector<16xf32>" in str(module)
    source = render_c(module)
    assert "for (long d1 = 0; d1 < 32; d1 += 16)" in source  # 45 outputs: 2 vectors of 16
    assert "for (long d1 = 32; d1 < 45; d1++)" in source  # and 13 scalar points


def test_the_choice_needs_a_third_more_work_per_second():
    assert lanes.choose(600_000, 650_000) == 16  # 16 lanes do 1.85x the work of 8
    assert lanes.choose(600_000, 900_000) == 16  # 1.33x
    assert lanes.choose(600_000, 1_000_000) == 8  # 1.2x: a double-pumped AVX-512
    assert lanes.choose(600_000, 7_900_000) == 8  # AVX2: a 16-lane vector spills


def test_the_probe_measures_once_and_the_pipeline_carries_its_width(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GRADFUSE_C_PIPELINE", raising=False)
    lanes._lanes.cache_clear()
    ns8, ns16 = lanes.measure()
    assert ns8 > 0 and ns16 > 0
    width = lanes.host_lanes()
    assert width in (8, 16)
    assert len(list(tmp_path.glob("c/lanes-*.txt"))) == 1  # the choice, cached on disk
    lanes._lanes.cache_clear()

    def again() -> tuple[int, int]:
        raise AssertionError("measured again: the cached choice was not read")

    monkeypatch.setattr(lanes, "measure", again)
    assert lanes.host_lanes() == width  # read back, not measured
    rows, fill = lanes.host_rows(), lanes.host_fill()
    tile = 2 * width  # 2 vectors: 16 or 32
    blocks = f"jam-rows={rows} jam-fill={fill}"
    assert pipeline_of("c") == f"cpu{{lanes={width} {blocks} pack-tile={tile}}}"
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{jam-work=0}")
    assert pipeline_of("c") == f"cpu{{jam-work=0 lanes={width} {blocks} pack-tile={tile}}}"
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{lanes=8 jam-rows=2}")
    assert pipeline_of("c") == "cpu{lanes=8 jam-rows=2 pack-tile=16}"  # explicit choices kept
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{lanes=16 pack-tile=16}")
    assert pipeline_of("c") == f"cpu{{lanes=16 pack-tile=16 {blocks}}}"
    lanes._lanes.cache_clear()


@pytest.mark.parametrize(
    ("tuning", "registers"),
    [("-march=skylake-avx512", 32), ("-march=haswell -mavx512f", 32), ("-march=haswell", 16),
     ("-march=znver3", 16), ("-march=x86-64 -mno-fma", 16)],
)  # fmt: skip
def test_register_blocks_take_a_quarter_of_the_vector_registers(tuning, registers):
    """The register file is the instruction set's: gcc's macros for the flags say it."""
    flags = ("-O2", *tuning.split())
    assert lanes.vector_registers(flags) == registers
    assert lanes._rows(flags) == registers // 4
    assert lanes._fill(flags) == (6 if registers == 16 else 8)  # 12 sums of 16, or 8 rows


def test_register_blocks_of_four_rows_hold_8_sums():
    """`jam-rows=4` (16 registers) jams 4 rows x 2 vectors: 8 sums a block."""
    pipeline = "cpu{jam-work=0 lanes=8 jam-rows=4}"
    module = str(compile_module(parse_tg(BLOCKS), "c", pipeline=pipeline).module)
    assert "-> (" + ", ".join(["vector<8xf32>"] * 8) + ")" in module
    assert "-> (" + ", ".join(["vector<8xf32>"] * 16) + ")" not in module
    rng = np.random.default_rng(5)
    types = [a.type for a in parse_tg(BLOCKS).ops.first.body.block.args]
    args = [rng.standard_normal(t.get_shape()).astype(np.float32) * 0.3 for t in types]
    agree(BLOCKS, "c", pipeline=pipeline, args=args)


TRANSPOSED = {
    "conv-3x3": (lambda: Conv2d(16, 32, 3, 1, 1, bias=False), (2, 16, 8, 8)),
    "conv-3x3-to-4x4": (lambda: Conv2d(32, 32, 3, 1, 1), (2, 32, 4, 4)),
}
"""Input gradients whose weight copies gather 16 lanes 9 elements apart (as ResNet-18's
3 x 3 convolutions; the second with a bias, on a small image as layer4's)."""


@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_weights_gathered_in_16_lanes_are_transposed_in_registers_exactly(name):
    """`loops-transpose-reads` moves the same floats as the gathers it replaces: an
    input gradient's packed weight (16 lanes along the input channels, the taps
    apart) loaded whole and shuffled gives bitwise the gathers' results."""
    make, shape = TRANSPOSED[name]
    spec = expand("cpu{lanes=16}")
    without = ",".join(p for p in spec.split(",") if p != "loops-transpose-reads")
    got = {}
    for label, pipeline in (("transposed", spec), ("gathered", without)):
        out = record(make, shape, np.float32)
        recorded = program()
        program_c = compile_module(recorded.module.clone(), "c", pipeline=pipeline)
        assert ("memref.collapse_shape" in str(program_c.module)) == (label == "transposed")
        params = {key: p.data for key, p in recorded.params.items()}
        program_c.run(receivers=recorded.receivers, params=params)
        got[label] = out
    assert len(got["transposed"]) == len(list(make().parameters())) + 2
    for a, b in zip(got["transposed"], got["gathered"], strict=True):
        assert np.array_equal(a, b)


def test_both_sums_of_a_batch_norms_gradient_run_in_lanes_and_match_the_reference():
    """loops-vectorize's `two_sums` case: each of a rows nest's two sums along W in
    lanes (partial sums, a `simd reduction` each) within `agree`'s tolerance: 128
    positive terms a channel, whose float32 sum in any order is within 128 x 2^-24 =
    7.6e-6 of the exact one relative to it (under rtol 1e-5), and `g + x * s` with
    `x * s` a tenth of `g` (no cancellation)."""
    src = Path(__file__).resolve().parents[2] / "filecheck/passes/loops-vectorize.tg"
    (case,) = [c for c in src.read_text().split("// -----") if "@two_sums" in c]
    rng = np.random.default_rng(5)
    g = rng.uniform(0.5, 1.5, (2, 16, 8, 8)).astype(np.float32)
    x = rng.uniform(0.0, 0.001, (2, 16, 8, 8)).astype(np.float32)
    agree(case, "c", pipeline="cpu", args=[g, x])
    source = render_c(compile_module(parse_tg(case), "c", pipeline="cpu").module)
    assert source.count("#pragma omp simd reduction(+:") == 2


def test_a_batch_norms_sums_over_nhwc_write_their_centred_values_in_tiles():
    """loops-vectorize's last two cases (tests/filecheck/passes/loops-vectorize.tg): a
    batch norm's sums over a convolution's NHWC output, the lanes along the channels,
    write the centred values NCHW in the loop of the squares over W (8 x 8 images, and
    32 x 32, the lanes a page apart): `loops-transpose-writes` unrolls that loop by 8
    and stores 8 x 8 tiles along W, no lane one at a time. Each lane sums its own
    channel in the points' order, as the scalar nest did. Over seeds 0-9 the worst error
    is 0.58 of `agree`'s tolerance against a float64 run (0.65 built without FMA), and
    0.57 (0.56) against the float32 reference that the test compares with."""
    src = Path(__file__).resolve().parents[2] / "filecheck/passes/loops-vectorize.tg"
    *_, small, pages = src.read_text().split("// -----")
    rng = np.random.default_rng(23)
    w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3
    for case, size in ((small, 8), (pages, 32)):
        x = rng.standard_normal((2, 3, size, size)).astype(np.float32)
        agree(case, "c", pipeline="cpu", args=[x, w])
        source = render_c(compile_module(parse_tg(case), "c", pipeline="cpu").module)
        assert "__builtin_shuffle" in source
        assert not re.search(r"p\d+\[\d+\] = v\d+\[\d+\];", source)  # no lane's own store


WIDE = {
    "conv-3x3": (lambda: Conv2d(64, 64, 3, 1, 1, bias=False), (2, 64, 8, 8)),
    "convT-4x4-stride2": (lambda: ConvTranspose2d(64, 64, 4, 2, 1), (2, 64, 4, 4)),
}
"""Convolutions whose reductions run over 64 channels (`loops_pack.LONG_REDUCTION`),
into 64 channels: 2 tiles of 32 (a ResNet-18 layer, a DCGAN generator layer)."""


@pytest.mark.parametrize("name", sorted(WIDE))
def test_long_reductions_in_tiles_of_two_16_lane_vectors_match_float64(monkeypatch, name):
    """`pack-tile=32` (the c backend's choice with 16 lanes, on any machine here): the
    forward and input-gradient nests read weights packed in tiles of 32 channels and
    keep 2 vectors a row of their register blocks; the results (output, input and
    weight gradients, a bias's) come within test_c_loops_conv's float64 tolerance: at
    worst 0.35 of it (the conv's input gradient, sums of 576 terms), 0.32 built without
    FMA (`GRADFUSE_CFLAGS="-march=x86-64 -mno-fma"`)."""
    make, shape = WIDE[name]
    pipeline = "cpu{lanes=16 pack-tile=32}"
    record(make, shape, np.float32)
    module = str(compile_module(program().module.clone(), "c", pipeline=pipeline).module)
    assert "x32xf32>, vector<16xf32>" in module  # a vector load from a tile of 32
    assert "-> (" + ", ".join(["vector<16xf32>"] * 16) + ")" in module  # 8 rows x 2
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", pipeline)
    assert_matches_float64(make, shape, len(list(make().parameters())) + 2)


def test_a_block_of_3_taps_filled_with_2_channels_matches_float64(monkeypatch):
    """`jam-fill=6` (the c backend's choice with 16 vector registers): a 3 x 3 weight
    gradient's block of 3 taps takes 2 input channels, 6 rows x 2 vectors, 12 sums
    where `jam-rows=4` alone leaves 6; the results come within test_c_loops_conv's
    float64 tolerance: at worst 0.35 of it (the input gradient; the weight gradient's
    sums of 128 terms 0.22), 0.32 and 0.21 built without FMA (`-march=x86-64 -mno-fma`)."""
    make, shape = WIDE["conv-3x3"]
    pipeline = "cpu{lanes=8 jam-rows=4 jam-fill=6}"
    record(make, shape, np.float32)
    module = str(compile_module(program().module.clone(), "c", pipeline=pipeline).module)
    assert "-> (" + ", ".join(["vector<8xf32>"] * 12) + ")" in module  # 6 rows x 2
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", pipeline)
    assert_matches_float64(make, shape, 3)
