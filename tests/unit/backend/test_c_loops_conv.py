"""Convolutions for training on the `cpu` pipeline against the reference interpreter:
test_c_conv's shapes (forward, input and weight gradients; stride 2, transposed, 1x1,
3x3 and 4x4 windows, partial register blocks), their loops ordered by
`loops-interchange`, their weights or output gradients packed by `loops-pack`, their
lanes along the output channels (`loops-vectorize`, scattered where the output is
stored by rows) and their register blocks jammed (`loops-unroll-jam`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gradfuse import execute
from gradfuse.backend.c.host import render_c
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_c_conv import CASES, record  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
"""test_c_conv's tolerance, here against a float64 reference run. The float32 results
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


def worst_share(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error of `got` as a share of the tolerance at `want`."""
    return float(np.max(np.abs(got - want) / (ATOL + RTOL * np.abs(want))))


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolutions_on_the_cpu_pipeline_match_the_reference(name: str, monkeypatch) -> None:
    monkeypatch.setenv("GRADFUSE_C_PIPELINE", "cpu")
    make, shape = CASES[name]
    source = cpu_source(name)
    assert "gf_floatx8" in source  # lanes
    assert "static float" in source  # packed: a weight or an output gradient
    assert "% 2" not in source  # strided windows visit their live taps only (kernel-split-phases)
    got = record(make, shape, np.float32)
    execute(backend="c")
    want = record(make, shape, np.float64)
    execute(backend="reference")
    assert len(got) == len(want) >= 3
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and np.abs(w).max() > 0
        assert worst_share(g, w) < 1.0
