"""Every tg op on the reference interpreter, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, f16, f32, f64, i1

from gradfuse.backend.interpreters.tg import run, run_value
from gradfuse.dialects import tg
from gradfuse.dialects.tg import tensor

RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def dense(values: np.ndarray, element=f32) -> DenseIntOrFPElementsAttr:
    ty = TensorType(element, list(values.shape))
    return DenseIntOrFPElementsAttr.from_list(ty, values.reshape(-1).tolist())


BINARY = [
    (tg.AddOp, np.add),
    (tg.SubOp, np.subtract),
    (tg.MulOp, np.multiply),
    (tg.DivOp, np.divide),
    (tg.MaxOp, np.maximum),
]


@pytest.mark.parametrize(("op", "ref"), BINARY, ids=[o.name for o, _ in BINARY])
def test_binary(fb, op, ref):
    b = fb(tensor([3, 4]), tensor([3, 4]))
    module = b.module(b(op(b.args[0], b.args[1])))
    x, y = rand(3, 4), rand(3, 4) + 3.0
    out = run_value(module, x, y)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref(x, y), rtol=1e-6)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = [
    (tg.NegOp, np.negative, rand(5)),
    (tg.Exp2Op, np.exp2, rand(5)),
    (tg.Log2Op, np.log2, np.abs(rand(5)) + 0.1),
    (tg.SqrtOp, np.sqrt, np.abs(rand(5))),
    (tg.RecipOp, np.reciprocal, rand(5) + 5.0),
    (tg.SinOp, np.sin, rand(5)),
    (tg.SigmoidOp, _sigmoid, rand(5) * 4),
    (tg.TanhOp, np.tanh, rand(5)),
    (tg.ReluOp, lambda x: np.maximum(x, 0), rand(5)),
]


@pytest.mark.parametrize(("op", "ref", "x"), UNARY, ids=[o.name for o, _, _ in UNARY])
def test_unary(fb, op, ref, x):
    b = fb(tensor([5]))
    out = run_value(b.module(b(op(b.args[0]))), x)
    assert out.dtype == np.float32 and out.shape == (5,)
    np.testing.assert_allclose(out, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_sigmoid_saturates_without_nan(fb):
    b = fb(tensor([3]))
    out = run_value(b.module(b(tg.SigmoidOp(b.args[0]))), np.array([-1e4, 0, 1e4], np.float32))
    np.testing.assert_array_equal(out, [0.0, 0.5, 1.0])


@pytest.mark.parametrize("dim", [0, 1])
def test_softmax(fb, dim):
    b = fb(tensor([3, 4]))
    x = rand(3, 4)
    out = run_value(b.module(b(tg.SoftmaxOp(b.args[0], dim))), x)
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=dim, keepdims=True), rtol=1e-6)


def test_softmax_is_stable_for_large_inputs(fb):
    b = fb(tensor([2, 3]))
    x = np.array([[1000, 1001, 1002], [-1000, 0, 1000]], np.float32)
    out = run_value(b.module(b(tg.SoftmaxOp(b.args[0], 1))), x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[0], [0.09003057, 0.24472847, 0.66524096], rtol=1e-5)


def test_cmplt_gives_bool_and_where_selects(fb):
    b = fb(tensor([6]), tensor([6]))
    mask = b(tg.CmpLtOp(b.args[0], b.args[1]))
    picked = b(tg.WhereOp(mask, b.args[0], b.args[1]))
    x, y = rand(6), rand(6)
    mask_out, picked_out = run(b.module(mask, picked), args=[x, y]).results
    assert mask_out.dtype == np.bool_
    np.testing.assert_array_equal(mask_out, x < y)
    np.testing.assert_array_equal(picked_out, np.minimum(x, y))


@pytest.mark.parametrize(
    ("element", "dtype"), [(f32, np.float32), (f16, np.float16), (f64, np.float64), (i1, np.bool_)]
)
def test_cast_from_f32(fb, element, dtype):
    b = fb(tensor([4]))
    x = np.array([0.0, 1.5, -2.25, 0.0], np.float32)
    out = run_value(b.module(b(tg.CastOp(b.args[0], element))), x)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, x.astype(dtype) if dtype != np.bool_ else x != 0)


def test_cast_mask_to_f32(fb):
    b = fb(tensor([3]), tensor([3]))
    mask = b(tg.CmpLtOp(b.args[0], b.args[1]))
    out = run_value(b.module(b(tg.CastOp(mask, f32))), np.zeros(3), np.array([1, 0, -1]))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 0.0, 0.0])


def test_dot_2d(fb):
    b = fb(tensor([2, 3]), tensor([3, 5]))
    x, w = rand(2, 3), rand(3, 5)
    out = run_value(b.module(b(tg.DotOp(b.args[0], b.args[1]))), x, w)
    np.testing.assert_allclose(out, x @ w, rtol=1e-5)


def test_dot_batched(fb):
    b = fb(tensor([4, 2, 3]), tensor([4, 3, 5]))
    x, w = rand(4, 2, 3), rand(4, 3, 5)
    out = run_value(b.module(b(tg.DotOp(b.args[0], b.args[1]))), x, w)
    np.testing.assert_allclose(out, np.matmul(x, w), rtol=1e-5)


@pytest.mark.parametrize("dims", [[0], [1], [0, 2], [0, 1, 2]])
@pytest.mark.parametrize(
    ("op", "ref"), [(tg.ReduceSumOp, np.sum), (tg.ReduceMaxOp, np.max), (tg.ReduceMeanOp, np.mean)]
)
def test_reductions_remove_dims(fb, op, ref, dims):
    b = fb(tensor([2, 3, 4]))
    x = rand(2, 3, 4)
    out = run_value(b.module(b(op(b.args[0], dims))), x)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref(x, axis=tuple(dims)), rtol=1e-5)


def test_constant_splat_and_dense(fb):
    b = fb()
    splat = b(tg.ConstantOp(0.25, tensor([2, 3])))
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    full = b(tg.ConstantOp(dense(values), tensor([2, 3])))
    one = b(
        tg.ConstantOp(DenseIntOrFPElementsAttr.from_list(tensor([2, 2]), [7.0]), tensor([2, 2]))
    )
    s, d, o = run(b.module(splat, full, one)).results
    np.testing.assert_array_equal(s, np.full((2, 3), 0.25, np.float32))
    np.testing.assert_array_equal(d, values)
    np.testing.assert_array_equal(o, np.full((2, 2), 7.0))
    assert s.dtype == d.dtype == np.float32


def test_rank0_values_stay_arrays(fb):
    b = fb(tensor([]), tensor([]))
    out = run_value(b.module(b(tg.AddOp(b.args[0], b.args[1]))), np.float32(1), np.float32(2))
    assert isinstance(out, np.ndarray) and out.shape == () and out == 3.0


def test_reshape(fb):
    b = fb(tensor([2, 6]))
    x = rand(2, 6)
    out = run_value(b.module(b(tg.ReshapeOp(b.args[0], [3, 2, 2]))), x)
    np.testing.assert_array_equal(out, x.reshape(3, 2, 2))


def test_permute_result_dim_i_is_input_dim_perm_i(fb):
    b = fb(tensor([2, 3, 4]))
    x = rand(2, 3, 4)
    out = run_value(b.module(b(tg.PermuteOp(b.args[0], [2, 0, 1]))), x)
    assert out.shape == (4, 2, 3)
    np.testing.assert_array_equal(out, np.transpose(x, (2, 0, 1)))


def test_broadcast(fb):
    b = fb(tensor([1, 3]))
    x = rand(1, 3)
    out = run_value(b.module(b(tg.BroadcastOp(b.args[0], [4, 3]))), x)
    np.testing.assert_array_equal(out, np.repeat(x, 4, axis=0))


def test_slice_with_strides(fb):
    b = fb(tensor([4, 9]))
    x = rand(4, 9)
    out = run_value(b.module(b(tg.SliceOp(b.args[0], [1, 1], [4, 9], [2, 3]))), x)
    np.testing.assert_array_equal(out, x[1:4:2, 1:9:3])


def test_pad(fb):
    b = fb(tensor([2, 3]))
    x = rand(2, 3)
    out = run_value(b.module(b(tg.PadOp(b.args[0], [0, 1], [2, 0], -1.5))), x)
    np.testing.assert_array_equal(out, np.pad(x, [(0, 2), (1, 0)], constant_values=-1.5))


@pytest.mark.parametrize("dim", [0, 1])
def test_concat(fb, dim):
    b = fb(tensor([2, 2]), tensor([2, 2]), tensor([2, 2]))
    xs = [rand(2, 2) for _ in range(3)]
    out = run_value(b.module(b(tg.ConcatOp(list(b.args), dim))), *xs)
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=dim))


def test_float64_mode_computes_in_float64(fb):
    b = fb(tensor([2]))
    c = b(tg.ConstantOp(1e-9, tensor([2])))
    module = b.module(b(tg.AddOp(b.args[0], c)))
    out = run_value(module, np.ones(2, np.float32), dtype=np.float64)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, 1.0 + 1e-9)
    # the float32 default loses the small constant, as a GPU would
    out32 = run_value(module, np.ones(2))
    assert out32.dtype == np.float32 and (out32 == 1.0).all()


def test_f16_stays_f16_by_default_and_goes_up_in_float64_mode(fb):
    b = fb(tensor([3], f16))
    module = b.module(b(tg.AddOp(b.args[0], b.args[0])))
    assert run_value(module, np.ones(3)).dtype == np.float16
    assert run_value(module, np.ones(3), dtype=np.float64).dtype == np.float64


def test_view_reads_through_its_affine_map(fb):
    from xdsl.ir.affine import AffineExpr, AffineMap

    d0, d1 = AffineExpr.dimension(0), AffineExpr.dimension(1)
    b = fb(tensor([3, 4]))
    x = rand(3, 4)
    transpose = AffineMap(2, 0, (d1, d0))  # result [4, 3]: y[i, j] = x[j, i]
    out = run_value(b.module(b(tg.ViewAccessOp(b.args[0], transpose, [4, 3]))), x)
    np.testing.assert_array_equal(out, x.T)
    b = fb(tensor([6]))
    x = rand(6)
    rows = AffineMap(2, 0, (d0 * 3 + d1,))  # result [2, 3]: a reshape as a map
    out = run_value(b.module(b(tg.ViewAccessOp(b.args[0], rows, [2, 3]))), x)
    np.testing.assert_array_equal(out, x.reshape(2, 3))


def test_guarded_view_reads_zero_outside_its_guard(fb):
    from xdsl.ir.affine import (
        AffineConstraintExpr,
        AffineConstraintKind,
        AffineExpr,
        AffineMap,
        AffineSet,
    )

    d0 = AffineExpr.dimension(0)
    ge = AffineConstraintKind.ge
    b = fb(tensor([4]))
    x = rand(4)
    shifted = AffineMap(1, 0, (d0 - 1,))  # y[i] = x[i - 1] for 1 <= i <= 4, else 0
    zero = AffineExpr.constant(0)
    inside = (
        AffineConstraintExpr(ge, d0 - 1, zero),
        AffineConstraintExpr(ge, AffineExpr.constant(4) - d0, zero),
    )
    guard = AffineSet(1, 0, inside)  # 1 <= i <= 4
    out = run_value(b.module(b(tg.ViewAccessOp(b.args[0], shifted, [6], guard))), x)
    np.testing.assert_array_equal(out, np.pad(x, (1, 1)))
