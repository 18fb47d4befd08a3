"""`kernel-pad-rows` (`gradfuse.passes.kernel.pad_rows`): which gradient buffers get
longer rows, and that the results do not change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gradfuse.backend import compile_module
from gradfuse.backend.interpreters.tg import run
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import expand, run_pipeline
from gradfuse.passes.kernel.pad_rows import ROWS, crowded, padded_shape, sets_of

GOLDEN = Path(__file__).resolve().parents[2] / "filecheck/passes/kernel-pad-rows.tg"


@pytest.mark.parametrize(
    ("shape", "want"),
    [
        ([512, 256, 4, 4], [512, 257, 4, 4]),  # DCGAN: rows of 16 KiB, one set
        ([1, 512, 4608], [1, 512, 4624]),  # ResNet-18's layer 4: 18 KiB, 2 sets of 8
        ([100, 512, 4, 4], [100, 513, 4, 4]),  # DCGAN's first layer: 100 rows, 1 set
        ([1, 256, 2304], [1, 256, 2304]),  # 9 KiB: 4 sets of 4 lines, kept
        ([1, 128, 1152], [1, 128, 1152]),  # 4.5 KiB: 8 sets of 2
        ([1, 64, 576], [1, 64, 576]),  # 2.25 KiB: 16 sets already
        ([1, 8, 36], [1, 8, 36]),  # 8 rows in 8 sets
        ([64, 3, 4, 4], [64, 3, 4, 4]),  # rows of 192 bytes
        ([10, 512], [10, 512]),  # a linear layer's [out, in]: 10 rows, 2 sets of 5
        ([64, 128], [64, 128]),  # a transformer's feed-forward weight: 8 sets of 2
        ([2, 4, 16, 16], [2, 4, 16, 16]),  # 2 rows 4 KiB apart: one set, not crowded
        ([8, 64, 16, 16], [8, 64, 16, 16]),  # 64 KiB rows step 1 KiB: no pad helps
        ([8], [8]),  # no dim after the rows
        ([1, 1, 16], [1, 1, 16]),
    ],
)
def test_padded_shape(shape: list[int], want: list[int]) -> None:
    assert padded_shape(shape, 4) == want


@pytest.mark.parametrize("row", [16, 48, 64, 100, 147, 256, 576, 1000, 1024, 2304, 4096, 8192])
def test_crowded_rows_get_as_many_sets_and_stay_line_aligned(row: int) -> None:
    """A row is padded exactly where its 16 rows are crowded, by whole cache lines, the
    fewest that spread the rows a block writes."""
    new = padded_shape([1, 64, row], 4)[2]
    assert (new != row) == crowded(row * 4, ROWS)
    if new != row:
        assert (new - row) * 4 % 64 == 0
        assert sets_of(new * 4, ROWS) == ROWS
        assert all(sets_of(n * 4, ROWS) < ROWS for n in range(row, new, 16))


def test_padding_changes_no_result() -> None:
    """The golden test's momentum SGD on a 4 x 4 convolution's weight (its gradient's
    rows 1024 -> 1040 floats): the params after 2 steps are bitwise those of the `cpu`
    pipeline without `kernel-pad-rows` (the same sums in the same order; the pad is never
    read), and near float64. There each gradient is a float32 sum of at most 32 products:
    its error is at most 32 * 2^-24 times the sum of their magnitudes (the program run
    on |x| and |t| in float64 gives them, summed as the momentum sums the gradients),
    the momentum adds a few roundings of that size a step and the update 0.01 of each
    step's momentum error and its own roundings."""
    program = GOLDEN.read_text().split("// -----")[0]
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 2, 64, 8, 8)) * 0.5).astype(np.float32)
    t = (rng.standard_normal((2, 2, 16, 4, 4)) * 0.5).astype(np.float32)
    compiled = compile_module(parse_tg(program), "c", pipeline="cpu")
    assert "memref<1x16x1040xf32>" in str(compiled.module)
    got = compiled.run(feeders={"x": x, "t": t}).params
    unpadded = ",".join(p for p in expand("cpu").split(",") if p != "kernel-pad-rows")
    plain = compile_module(parse_tg(program), "c", pipeline=unpadded)
    assert "memref<1x16x1024xf32>" in str(plain.module)
    want = plain.run(feeders={"x": x, "t": t}).params
    for key in ("m", "w"):
        np.testing.assert_array_equal(got[key], want[key])
    exact = parse_tg(program)
    run_pipeline(exact, "tg")
    f64 = run(exact, feeders={"x": x, "t": t}, dtype=np.float64).params
    magnitudes = run(exact, feeders={"x": np.abs(x), "t": np.abs(t)}, dtype=np.float64).params
    u, size = 2.0**-24, magnitudes["m"]  # 0.9 * S1 + S2: S_k, step k's magnitudes
    m_bound = 36 * u * size  # 32 u (0.9 S1 + S2), and the momentum's roundings
    assert np.all(np.abs(got["m"] - f64["m"]) <= m_bound)
    w_bound = 0.01 * 2 * 40 * u * size + 4 * u * np.abs(f64["w"])  # m1's, m2's errors
    assert np.all(np.abs(got["w"] - f64["w"]) <= w_bound)
