"""`loops-skip-dead-sums` on the input gradient of a 1 x 1 convolution of stride 2
(tests/filecheck/passes/loops-skip-dead-sums.tg): the blocks it skips would have summed
products with zeros from +0, so the results are bitwise those of the pipeline without
it, and both agree with the reference interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from compiled import agree  # tests/unit (conftest puts it on the path)

from gradfuse.backend import compile_module
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import expand

GOLDEN = Path(__file__).resolve().parents[2] / "filecheck/passes/loops-skip-dead-sums.tg"


def test_skipped_blocks_give_the_same_bits_and_agree_with_the_reference():
    (case,) = [c for c in GOLDEN.read_text().split("// -----") if "@downsample_grad" in c]
    rng = np.random.default_rng(7)
    args = [
        rng.standard_normal(shape).astype(np.float32)
        for shape in ((2, 16, 8, 8), (32, 16, 1, 1), (2, 32, 4, 4))
    ]
    spec = expand("cpu{jam-work=0}")
    without = ",".join(p for p in spec.split(",") if p != "loops-skip-dead-sums")
    got = {}
    for label, pipeline in (("skipping", spec), ("summing", without)):
        program = compile_module(parse_tg(case), "c", pipeline=pipeline)
        assert ("scf.if" in str(program.module)) == (label == "skipping")
        got[label] = program.run(args=args).results
    for a, b in zip(got["skipping"], got["summing"], strict=True):
        assert np.array_equal(a, b)
    (grad,) = got["skipping"]
    assert np.all(grad[:, :, 1::2, :] == 0) and np.all(grad[:, :, :, 1::2] == 0)
    assert np.count_nonzero(grad[:, :, ::2, ::2]) == grad[:, :, ::2, ::2].size
    agree(case, "c", pipeline="cpu{jam-work=0}", args=args)
