"""tg-decompose: composites become primitives that compute the same values."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from _gradcheck import apply, build, model_loc, run
from xdsl.ir import SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.tg.decompose import DECOMPOSITIONS, TgDecomposePass

PRIMITIVES = {
    "tg.add", "tg.sub", "tg.mul", "tg.div", "tg.neg", "tg.max", "tg.exp2", "tg.log2",
    "tg.sqrt", "tg.recip", "tg.sin", "tg.cmplt", "tg.where", "tg.cast", "tg.dot",
    "tg.reduce_sum", "tg.reduce_max", "tg.reshape", "tg.permute", "tg.broadcast",
    "tg.slice", "tg.pad", "tg.concat", "tg.constant",
}  # fmt: skip


def softmax_ref(x: np.ndarray, dim: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


# name -> (op builder, NumPy reference, input shape)
CASES: dict[str, tuple[Callable[[SSAValue], object], Callable[[np.ndarray], np.ndarray], tuple]] = {
    "sigmoid": (tg.SigmoidOp, lambda x: 1 / (1 + np.exp(-x)), (2, 5)),
    "tanh": (tg.TanhOp, np.tanh, (2, 5)),
    "relu": (tg.ReluOp, lambda x: np.maximum(x, 0), (2, 5)),
    "softmax_0": (lambda x: tg.SoftmaxOp(x, 0), lambda x: softmax_ref(x, 0), (3, 4)),
    "softmax_1": (lambda x: tg.SoftmaxOp(x, 1), lambda x: softmax_ref(x, 1), (3, 4)),
    "softmax_3d": (lambda x: tg.SoftmaxOp(x, 1), lambda x: softmax_ref(x, 1), (2, 3, 2)),
}


def composite_module(make: Callable[[SSAValue], object], shape: tuple):
    def body(e: Emitter, x: SSAValue) -> SSAValue:
        return e.emit(make(x))  # type: ignore[arg-type]

    return build(body, [shape], square=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_decomposed_composite_matches_the_reference(name: str):
    make, reference, shape = CASES[name]
    x = np.random.default_rng(1).uniform(-4, 4, size=shape)
    whole = run(composite_module(make, shape), args=[x], dtype=np.float64).results[0]
    module = apply(composite_module(make, shape), TgDecomposePass())
    names = {op.name for op in module.walk()} - {"builtin.module", "func.func", "func.return"}
    assert names <= PRIMITIVES
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        got = run(module, args=[x], dtype=dtype).results[0]
        np.testing.assert_allclose(got, reference(x), rtol=tol, atol=tol)
    np.testing.assert_allclose(whole, reference(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "softmax_1"])
def test_decomposition_is_stable_for_large_inputs(name: str):
    make, reference, shape = CASES[name]
    x = np.linspace(-500.0, 500.0, num=int(np.prod(shape))).reshape(shape)
    module = apply(composite_module(make, shape), TgDecomposePass())
    got = run(module, args=[x], dtype=np.float32).results[0]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, reference(x), atol=1e-6)


def test_new_ops_keep_the_location_of_the_composite():
    module = composite_module(lambda x: tg.SoftmaxOp(x, 1), (2, 3))
    apply(module, TgDecomposePass())
    locs = {op.location for op in module.walk() if op.name.startswith("tg.")}
    assert locs == {model_loc(1)}


def test_sigmoid_becomes_mul_exp2_add_recip():
    module = apply(composite_module(tg.SigmoidOp, (4,)), TgDecomposePass())
    names = [op.name for op in module.walk() if op.name.startswith("tg.")]
    assert names == ["tg.constant", "tg.mul", "tg.exp2", "tg.constant", "tg.add", "tg.recip"]


def test_one_decomposition_per_composite():
    assert set(DECOMPOSITIONS) == set(tg.COMPOSITES)
