"""`loops-skip-dead-sums` on the input gradient of a 1 x 1 convolution of stride 2, and on
that of a 3 x 3 one split into phases (tests/filecheck/passes/loops-skip-dead-sums.tg):
the blocks and taps it skips would have summed products with zeros from +0, so the
results are bitwise those of the pipeline without it, and both agree with the reference
interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from compiled import agree  # tests/unit (conftest puts it on the path)

from gradfuse.backend import compile_module
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import expand

GOLDEN = Path(__file__).resolve().parents[2] / "filecheck/passes/loops-skip-dead-sums.tg"


def skipped_and_summed(name: str, args: list[np.ndarray]) -> list[np.ndarray]:
    """The golden case `name` on the c backend with and without the pass: asserts the
    same bits and the reference's values; the results."""
    (case,) = [c for c in GOLDEN.read_text().split("// -----") if f"@{name}(" in c]
    spec = expand("cpu{jam-work=0}")
    without = ",".join(p for p in spec.split(",") if p != "loops-skip-dead-sums")
    got = {}
    for label, pipeline in (("skipping", spec), ("summing", without)):
        program = compile_module(parse_tg(case), "c", pipeline=pipeline)
        assert ("scf.if" in str(program.module)) == (label == "skipping")
        got[label] = program.run(args=args).results
    for a, b in zip(got["skipping"], got["summing"], strict=True):
        assert np.array_equal(a, b)
    agree(case, "c", pipeline="cpu{jam-work=0}", args=args)
    return got["skipping"]


def test_skipped_blocks_give_the_same_bits_and_agree_with_the_reference():
    rng = np.random.default_rng(7)
    shapes = [(2, 16, 8, 8), (32, 16, 1, 1), (2, 32, 4, 4)]
    args = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    (grad,) = skipped_and_summed("downsample_grad", args)
    assert np.all(grad[:, :, 1::2, :] == 0) and np.all(grad[:, :, :, 1::2] == 0)
    assert np.count_nonzero(grad[:, :, ::2, ::2]) == grad[:, :, ::2, ::2].size


def test_skipped_taps_give_the_same_bits_and_agree_with_the_reference():
    """Integers in [-3, 3]: the gradient of h sums at most 16 x 9 products of 3 x 3, the
    weight gradient 2 x 8 x 8 of those times 3 (497,664 < 2^24), so every order of the
    sums is exact and the c backend equals the reference to the bit."""
    rng = np.random.default_rng(7)
    shapes = [(2, 8, 8, 8), (16, 8, 3, 3), (16, 16, 3, 3), (2, 16, 4, 4)]
    args = [rng.integers(-3, 4, shape).astype(np.float32) for shape in shapes]
    (grad,) = skipped_and_summed("strided_grad", args)
    want = compile_module(parse_tg(GOLDEN.read_text().split("// -----")[-1]), "reference")
    assert np.array_equal(grad, want.run(args=args).results[0])
    assert np.count_nonzero(grad) > grad.size // 2
