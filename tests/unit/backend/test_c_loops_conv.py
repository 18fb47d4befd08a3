"""Convolutions for training on the `cpu` pipeline against the reference interpreter:
the shapes DCGAN and ResNet train with (forward, input and weight gradients; stride 2
and padding 1, transposed, 1x1 with stride 2, 3x3 and 4x4 windows, 8x8 and 4x4 images,
one channel, partial register blocks), in float32 and float64, their loops ordered by
`loops-interchange`, their weights or output gradients packed by `loops-pack`, their
lanes along the output channels (`loops-vectorize`, scattered where the output is
stored by rows), their padded windows read from zero-bordered copies (`loops-pad`)
and their register blocks jammed (`loops-unroll-jam`)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import ModuleOp

import gradfuse
from gradfuse import Parameter, Receiver, execute
from gradfuse.backend.c.host import render_c
from gradfuse.frontend.recorder import program
from gradfuse.nn import Conv2d, ConvTranspose2d, LeakyReLU, Module, Sequential
from gradfuse.passes import PIPELINES, run_pipeline
from gradfuse.passes.loops.loop_ir import kernel_functions
from gradfuse.passes.loops.loops_vectorize import innermost_nests, innermost_reduction

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
    x[:, 0, : shape[2] // 2] = 0  # whole image rows of zeros too
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


RTOL, ATOL = 1e-4, 1e-5
"""The tolerance, here against a float64 reference run. The float32 results
on this pipeline (sums reordered: channels innermost, lanes of 8, blocks of up to 8 x 16)
come within 0.38 of it at worst (`worst_share`: conv-from-1-channel's weight gradient,
sums of 512 terms; the other cases 0.28 and below), float32 rounding alone; the margin
covers other CPUs' FMA contraction and vector widths, which change the rounding, not
its size."""


def cpu_source(name: str) -> str:
    make, shape = CASES[name]
    record(make, shape, np.float32)
    module = program().module.clone()
    run_pipeline(module, "cpu")
    return render_c(module)


def guarded_reads(module: ModuleOp) -> int:
    """The reads in innermost reductions whose value a guard selects (`select(g, x[..],
    0)`: a window's read of padding)."""
    count = 0
    for fn in kernel_functions(module):
        for nest in innermost_nests(fn):
            loop = innermost_reduction(nest)
            for op in loop.body.walk() if loop is not None else ():
                if isinstance(op, memref.LoadOp):
                    count += any(isinstance(u.operation, arith.SelectOp) for u in op.res.uses)
    return count


def worst_share(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error of `got` as a share of the tolerance at `want`."""
    return float(np.max(np.abs(got - want) / (ATOL + RTOL * np.abs(want))))


def assert_matches_float64(make, shape: tuple[int, ...], count: int) -> None:
    """The c backend's float32 output and gradients (`count` arrays: the output, x's and
    each parameter's gradient) within RTOL and ATOL of the reference's float64 ones."""
    got = record(make, shape, np.float32)
    execute(backend="c")
    want = record(make, shape, np.float64)
    execute(backend="reference")
    assert len(got) == len(want) == count
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and np.abs(w).max() > 0
        assert worst_share(g, w) < 1.0


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolutions_on_the_cpu_pipeline_match_the_reference(name: str) -> None:
    make, shape = CASES[name]
    source = cpu_source(name)
    assert "gf_floatx8" in source  # lanes
    assert "static float" in source  # packed: a weight or an output gradient
    assert "% 2" not in source  # strided windows visit their live taps only (kernel-split-phases)
    assert_matches_float64(make, shape, len(list(make().parameters())) + 2)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"conv-1x1-stride2"}))
def test_padded_windows_are_read_without_guards(name: str) -> None:
    """Each padded convolution (forward, input and weight gradient) reads its window in
    its innermost reduction with a guard until `loops-trim-taps` and `loops-pad`, and
    without one after them (test_convolutions_on_the_cpu_pipeline_match_the_reference
    checks the numbers). The unpadded 1x1 convolution is left out: its input gradient's
    guard is a parity."""
    make, shape = CASES[name]
    record(make, shape, np.float32)
    before = PIPELINES["cpu"].split(",loops-trim-taps,")[0]
    module = program().module.clone()
    run_pipeline(module, before)
    assert guarded_reads(module) >= 3
    run_pipeline(module, "loops-trim-taps,loops-pad")
    assert guarded_reads(module) == 0


TILE_PACKS = PIPELINES["cpu"].replace(
    "loops-pack-tiles", "loops-pack-tiles{min-bytes=1024 min-tiles=2}"
)
"""The `cpu` pipeline with `loops-pack-tiles`' thresholds lowered to a small case."""


def test_a_weight_copied_tile_by_tile_matches_the_reference(monkeypatch) -> None:
    """64 output channels, 4 tiles: the forward convolution copies each tile of its
    weight in that tile's iteration, into an array on the thread's stack, the input
    gradient pads each image of its output gradient in that image's iteration (its 64
    channels, which the reduction steps through, last), and the
    weight gradient's copy of its input (16 channels in lanes of 8, 6 x 6 = 36 points
    a channel: 4 transposed 8 x 8 tiles and 4 points gathered, `loops-transpose-reads`)
    is made a tile at a time; the input gradient's weight copy (one tile) stays whole.
    ResNet-18's 512-channel weights take this path at the pipeline's own thresholds
    (test_c_loops' float64 ResNet-18)."""
    monkeypatch.setitem(PIPELINES, "cpu", TILE_PACKS)
    make, shape = (lambda: Conv2d(16, 64, 3, 1, 1, bias=False)), (2, 16, 6, 6)
    record(make, shape, np.float32)
    module = program().module.clone()
    run_pipeline(module, "cpu")
    tiles = [op for op in module.walk() if isinstance(op, memref.AllocaOp)]
    shapes = sorted(t.memref.type.get_shape() for t in tiles)
    assert shapes == [(1, 3, 3, 16, 16), (1, 6, 6, 2, 16), (1, 8, 8, 64)]
    assert re.search(r"^    float v\d+\[2304\] __attribute", render_c(module), re.M)
    assert_matches_float64(make, shape, 3)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_loop_passes_leave_no_detached_op_using_a_value(name: str) -> None:
    """Every use of every value, after each pass of the `cpu` pipeline from
    `convert-kernel-to-loops` on, is by an op inside the module: a rewrite that drops a
    trial (a loop body widened again, `loops-vectorize`) erases it."""
    make, shape = CASES[name]
    record(make, shape, np.float32)
    module = program().module.clone()
    passes = PIPELINES["cpu"].split(",")
    start = passes.index("convert-kernel-to-loops")
    run_pipeline(module, ",".join(passes[:start]))
    for p in passes[start:]:
        run_pipeline(module, p)
        for op in module.walk():
            for value in [*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)]:
                for use in value.uses:
                    user = use.operation
                    while user.parent_op() is not None:
                        user = user.parent_op()
                    assert user is module, f"{p}: {use.operation.name} outside the module"


def test_a_strided_3x3_input_gradient_reads_a_weight_padded_to_whole_phases() -> None:
    """A 3 x 3 convolution at stride 2 (ResNet-18's downsampling) whose input gradient
    is stored by channels (the next layer's weight gradient reads it): its live taps
    are split by phase, 2 x 2 a phase (`kernel-split-phases`), the weight's 4th tap
    past the window; `loops-pack` copies the weight in phase and tap order with 0 there,
    `p[r, s, t, u, co, ci]`, and the reduction reads the copy with the tap's test (made
    outside the loop over the channels); `loops-skip-dead-sums` runs that loop where the
    test holds, reading the copy with no test."""

    def make():
        return Sequential(Conv2d(8, 16, 3, 1, 1, bias=False), Conv2d(16, 16, 3, 2, 1, bias=False))

    def packed(module: ModuleOp) -> memref.AllocOp:
        (pack,) = [
            op for op in module.walk()
            if isinstance(op, memref.AllocOp) and op.memref.type.get_shape() == (2, 2, 2, 2, 16, 16)
        ]  # fmt: skip
        return pack

    shape = (2, 8, 8, 8)
    record(make, shape, np.float32)
    module = program().module.clone()
    before, _, after = PIPELINES["cpu"].partition(",loops-pad,")
    run_pipeline(module, before)
    uses = [u.operation for u in packed(module).memref.uses]
    stores = [op for op in uses if isinstance(op, memref.StoreOp)]
    assert [type(s.value.owner) for s in stores] == [arith.SelectOp]  # 0 past the window
    reads = [op for op in uses if isinstance(op, memref.LoadOp)]
    tests = [u.operation for r in reads for u in r.res.uses]
    assert reads and all(isinstance(t, arith.SelectOp) for t in tests)
    for read, test in zip(reads, tests, strict=True):
        loop = read.parent_op()
        assert isinstance(loop, scf.ForOp) and not loop.is_ancestor(test.cond.owner)  # type: ignore[attr-defined]
    run_pipeline(module, "loops-pad," + after)
    reads = [u.operation for u in packed(module).memref.uses if u.operation.results]
    assert reads and not any(
        isinstance(u.operation, arith.SelectOp) for r in reads for u in r.results[0].uses
    )
    assert any(isinstance(op, scf.IfOp) for op in module.walk())
    assert_matches_float64(make, shape, 4)


def trimmed_loops(module: ModuleOp) -> dict[str, int]:
    """Per kernel function, its `scf.for`s whose bounds are computed (`loops-trim-taps`)."""
    out: dict[str, int] = {}
    for fn in kernel_functions(module):
        n = sum(
            1
            for op in fn.walk()
            if isinstance(op, scf.ForOp)
            and not all(isinstance(b.owner, arith.ConstantOp) for b in (op.lb, op.ub))
        )
        if n:
            out[fn.sym_name.data] = n
    return out


@pytest.mark.parametrize("image", [2, 4])
def test_small_images_run_only_the_taps_inside_them(image: int) -> None:
    """ResNet-18's layer 4 shapes (3 x 3, padding 1, on 2 x 2 images, the second
    convolution reading the first's output): the forward, the input gradient and the
    weight gradient each bound their tap loops by the output point (`loops-trim-taps`:
    the weight gradient's image rows by the tap), read the image with no guard and no
    padded copy, and match float64 on the reference. Layer 3's 4 x 4 images skip 31%
    of the taps, under `min-skip`: they keep whole taps and a padded copy."""

    def make():
        return Sequential(Conv2d(16, 32, 3, 1, 1, bias=False), Conv2d(32, 16, 3, 1, 1, bias=False))

    shape = (8, 16, image, image)
    record(make, shape, np.float32)
    module = program().module.clone()
    run_pipeline(module, "cpu")
    trimmed = trimmed_loops(module)
    padded = [
        op for op in module.walk() if isinstance(op, memref.AllocOp) and op.memref.name_hint == "padded"
    ]  # fmt: skip
    if image == 2:  # 2 loops in each of 6 convolutions: 2 forwards, 2 input gradients
        assert sum(trimmed.values()) == 12  # (x's too: the loss reads it), 2 weight gradients
        assert not padded and guarded_reads(module) == 0
    else:
        assert not trimmed and padded
    assert_matches_float64(make, shape, 4)


def discriminator_layers() -> Sequential:
    """DCGAN's discriminator layers, small: 4 x 4 at stride 2, a leaky ReLU between."""
    return Sequential(
        Conv2d(8, 16, 4, 2, 1, bias=False),
        LeakyReLU(0.2, inplace=True),
        Conv2d(16, 16, 4, 2, 1, bias=False),
    )


DISCRIMINATOR_INPUT = (2, 8, 32, 32)


def discriminator_source(pipeline: str) -> str:
    """The C of `discriminator_layers`' forward and backward on `pipeline`."""
    record(discriminator_layers, DISCRIMINATOR_INPUT, np.float32)
    module = program().module.clone()
    run_pipeline(module, pipeline)
    return render_c(module)


def test_register_blocks_store_their_outputs_by_rows() -> None:
    """The forward convolutions' blocks of 8 image columns x 8 output channels, and the
    leaky ReLU's mask beside the first, are stored as transposed 8 x 8 tiles
    (`loops-transpose-writes`: `__builtin_shuffle` on floats and on mask bytes, then 8
    contiguous stores), and the results match float64 on the reference."""
    source = discriminator_source("cpu")
    assert source.count("(gf_intx8){0, 8, 1, 9, 4, 12, 5, 13}") >= 4 * 2  # 4 per tile
    assert source.count("(gf_boolx8){0, 8, 1, 9, 4, 12, 5, 13}") >= 4  # the mask's
    assert_matches_float64(discriminator_layers, DISCRIMINATOR_INPUT, 4)


def test_blocks_of_four_rows_store_4_by_8_tiles(monkeypatch) -> None:
    """With blocks of 4 rows (`jam-rows=4`, 16 vector registers), a block's 4 image
    columns x 8 output channels are a 4 x 8 tile: 8 shuffles, each channel's 4 columns
    stored from a half (`__builtin_shufflevector`, a `gf_floatx4`), the leaky ReLU's
    mask bytes likewise (`gf_boolx4`); the transpose moves floats and nothing else, so
    the results meet the float64 tolerance as the lane by lane stores did."""
    source = discriminator_source("cpu{jam-rows=4}")
    assert source.count("gf_floatx4 v") >= 8 and source.count("gf_boolx4 v") >= 8
    assert "gf_floatx4 v" in source.split("__builtin_shufflevector", 1)[0].rsplit("\n", 1)[1]
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{jam-rows=4 lanes=8}")
    assert_matches_float64(discriminator_layers, DISCRIMINATOR_INPUT, 4)


def test_blocks_of_16_lanes_store_8_by_16_tiles(monkeypatch) -> None:
    """With lanes of 16 (`cpu{lanes=16}`, on any machine), a block's 8 image columns x
    16 output channels are an 8 x 16 tile: each row's halves of 8 lanes
    (`__builtin_shufflevector`), of floats and of the leaky ReLU's mask bytes, are
    transposed as two 8 x 8 tiles and stored as 16 rows; the transpose moves floats and
    nothing else, so the results meet the float64 tolerance as lane stores did."""
    source = discriminator_source("cpu{lanes=16}")
    high = r"__builtin_shufflevector\((v\d+), \1, 8, 9, 10, 11, 12, 13, 14, 15\)"
    for kind in ("float", "bool"):
        assert re.search(rf"gf_{kind}x8 v\d+ = {high}", source)
    assert source.count("(gf_intx8){0, 8, 1, 9, 4, 12, 5, 13}") >= 4 * 2 * 2  # 2 tiles of 8
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{lanes=16}")
    assert_matches_float64(discriminator_layers, DISCRIMINATOR_INPUT, 4)


def test_convolutions_in_float64_match_the_reference_in_float64() -> None:
    """Float64 runs in scalar loops (the lanes are `vector<8xf32>`), its sums in another
    order than the reference's: relative errors near 1e-16 times the terms summed (at
    most 512 here), so 1e-10 relative and 1e-12 absolute leave orders of magnitude."""
    make, shape = CASES["convT-4x4-stride2-pad1"]
    record(make, shape, np.float64)
    module = program().module.clone()
    run_pipeline(module, "cpu")
    source = render_c(module)
    assert "double* __restrict__" in source and "gf_floatx8 v" not in source
    results = {}
    for backend in ("c", "reference"):
        got = record(make, shape, np.float64)
        execute(backend=backend)
        results[backend] = got
    for got, want in zip(results["c"], results["reference"], strict=True):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["conv-to-4x4", "convT-4x4-stride2-pad1", "conv-1x1-stride2"])
def test_weights_copied_in_8_lanes_are_transposed_in_tiles(monkeypatch, name: str) -> None:
    """With lanes of 8 (`cpu{lanes=8}`, on any machine), a weight copy that gathered 8
    output (or input) channels a step, their 4 x 4 taps (16 points: a phase-split one
    through `2 t - r + 1`) or 1 x 1 taps of 8 channels contiguous per channel, loads
    each channel's points as vectors and transposes 8 x 8 tiles
    (`loops-transpose-reads`): the C reads no float weight lane by lane, and the
    results match float64 on the reference as the gathers did."""
    make, shape = CASES[name]
    record(make, shape, np.float32)
    module = program().module.clone()
    run_pipeline(module, "cpu{lanes=8}")
    source = render_c(module)
    assert "(gf_intx8){0, 8, 1, 9, 4, 12, 5, 13}" in source
    assert not re.search(r"gf_floatx8 v\d+ = \(gf_floatx8\)\{p0\[0\], p0\[(?!1\])", source)
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu{lanes=8}")
    assert_matches_float64(make, shape, 3)
