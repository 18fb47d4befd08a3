"""tg.erf, tg.gather, tg.scatter_add, tg.random: semantics, gradients, fusion."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _gradcheck import check_gradients
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, f32
from xdsl.ir import SSAValue

from gradfuse.backend.interpreters.kernel import run_kernels
from gradfuse.backend.interpreters.tg import run
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline
from gradfuse.philox import philox, uniform

ROWS = np.array([[2, 0, 1], [4, 4, 0], [1, 3, 3], [0, 0, 2]], np.float32)


def const(e: Emitter, values: np.ndarray) -> SSAValue:
    ty = tensor(values.shape)
    dense = DenseIntOrFPElementsAttr.from_list(ty, values.ravel().tolist())
    return e.emit(tg.ConstantOp(dense, ty))


def gather_rows(e: Emitter, x: SSAValue) -> SSAValue:
    return e.emit(tg.GatherOp(x, const(e, ROWS), 0))


def scatter_rows(e: Emitter, src: SSAValue) -> SSAValue:
    return e.emit(tg.ScatterAddOp(const(e, ROWS), src, 0, (5, 3)))


def gather_cols(e: Emitter, x: SSAValue) -> SSAValue:
    return e.emit(tg.GatherOp(x, const(e, np.array([[2.0], [0.0], [1.0]], np.float32)), 1))


@pytest.mark.parametrize(
    "body, shape",
    [
        (lambda e, x: e.emit(tg.ErfOp(x)), (2, 3)),
        (gather_rows, (5, 3)),
        (scatter_rows, (4, 3)),
        (gather_cols, (3, 4)),
    ],
    ids=["erf", "gather_rows", "scatter_add", "gather_cols"],
)
def test_gradients_against_finite_differences(body, shape):
    check_gradients(body, [shape])


SRC = """
func @main(%x: tensor<5x3xf32>, %i: tensor<4x3xf32>, %c: tensor<f32>) -> (tensor<4x3xf32>, tensor<5x3xf32>, tensor<2x3xf32>, tensor<5x3xf32>) {
  %g = tg.gather %x, %i dim=0 : tensor<4x3xf32>
  %s = tg.scatter_add %i, %g dim=0 : tensor<5x3xf32>
  %r = tg.random %c seed=7 : tensor<2x3xf32>
  %e = tg.erf %x : tensor<5x3xf32>
  return %g, %s, %r, %e
}
"""


def test_reference_semantics_match_numpy():
    x = np.arange(15, dtype=np.float32).reshape(5, 3) / 7 - 1
    got = run(parse_tg(SRC), args=[x, ROWS, np.float32(3)]).results
    cols = np.arange(3)
    want_g = x[ROWS.astype(int), cols]
    want_s = np.zeros((5, 3), np.float32)
    np.add.at(want_s, (ROWS.astype(int), np.broadcast_to(cols, ROWS.shape)), want_g)
    np.testing.assert_allclose(got[0], want_g)
    np.testing.assert_allclose(got[1], want_s, rtol=1e-6)
    np.testing.assert_allclose(got[2], uniform(np.arange(6).reshape(2, 3), 3, 7))
    np.testing.assert_allclose(got[3], [[math.erf(v) for v in row] for row in x], rtol=1e-6)


def test_fused_kernels_agree_with_the_reference():
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    args = [x, ROWS, np.float32(11)]
    want = run(parse_tg(SRC), args=args).results
    fused = parse_tg(SRC)
    run_pipeline(fused, "kernels")
    for got, ref in zip(run_kernels(fused, args=args).results, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


def test_out_of_range_index_is_a_clear_error():
    bad = ROWS.copy()
    bad[0, 0] = 7
    with pytest.raises(GradfuseError, match=r"tg.gather: indices must be integers in \[0, 5\)"):
        run(parse_tg(SRC), args=[np.zeros((5, 3), np.float32), bad, np.float32(0)])


def test_philox_known_answer_and_uniformity():
    # Random123's known-answer test for philox2x32_10 with counter (0, 0) and key 0.
    x0, x1 = philox(np.array([0]), 0, 0)
    assert (int(x0[0]), int(x1[0])) == (0xFF1DAE59, 0x6CD10DF2)
    u = uniform(np.arange(20000), 5, 1)
    assert u.dtype == np.float32 and 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert not np.array_equal(u, uniform(np.arange(20000), 6, 1))  # a new counter, new numbers


def test_verifier_messages():
    x = tensor((5, 3), f32)
    with pytest.raises(Exception, match="dim 2 is outside rank 2"):
        parse_tg(
            "func @f(%x: tensor<5x3xf32>, %i: tensor<4x3xf32>) -> (tensor<4x3xf32>) {\n"
            "  %g = tg.gather %x, %i dim=2 : tensor<4x3xf32>\n  return %g\n}\n"
        )
    del x


def test_lowered_ir_agrees_and_verifies_in_mlir():
    from gradfuse.backend.interpreters.lowered import run_lowered

    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    args = [x, ROWS, np.float32(4)]
    want = run(parse_tg(SRC), args=args).results
    lowered = parse_tg(SRC)
    run_pipeline(lowered, "default")
    for got, ref in zip(run_lowered(lowered, args=args).results, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
