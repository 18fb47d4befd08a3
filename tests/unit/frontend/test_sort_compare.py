"""NaN in comparisons (tg_builder's compare_ne and compare_le) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from test_torch_methods import run  # (this directory is on the path)

import gradfuse
from gradfuse import Tensor

NAN = np.array(
    [[3.0, np.nan, 1.0, 3.0, -np.inf, 2.0], [0.5, 4.0, 1.0, 1.0, np.nan, -2.0]], np.float32
)
REVERSED = np.tile(np.arange(5.0, -1.0, -1.0, dtype=np.float32), (2, 1))


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_comparisons_with_nan_are_ieees(backend: str) -> None:
    def build(p: Tensor):  # noqa: ANN202
        q = p.gather(1, gradfuse.tensor(REVERSED))  # each row reversed
        masks = [p == q, p != q, p <= q, p >= q, p < q, p > q, p == 1.0, p != float("nan")]
        return p.sum(), [m.float() for m in masks]

    *got, _ = run(backend, build, NAN)
    q = NAN[:, ::-1]
    want = [NAN == q, NAN != q, NAN <= q, NAN >= q, NAN < q, NAN > q, NAN == 1.0, NAN != np.nan]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.astype(np.float32))
