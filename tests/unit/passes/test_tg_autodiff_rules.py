"""Every derivative rule of tg-autodiff against central finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _gradcheck import check_gradients
from xdsl.dialects.builtin import f32, f64
from xdsl.ir import SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import Emitter


def where_lt(e: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    return e.where(e.cmplt(x, y), e.mul(x, y), e.sin(y))


def cast_mask(e: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
    return e.mul(e.cast(e.cmplt(x, y), f32), x)


def cast_float(e: Emitter, x: SSAValue) -> SSAValue:
    wide = e.cast(x, f64)
    return e.cast(e.mul(wide, wide), f32)


# name -> (body, input shapes, (low, high) of the inputs)
CASES: dict[str, tuple[Callable[..., SSAValue], list[tuple[int, ...]], tuple[float, float]]] = {
    "add": (lambda e, x, y: e.add(x, y), [(2, 3), (2, 3)], (-1, 1)),
    "sub": (lambda e, x, y: e.sub(x, y), [(2, 3), (2, 3)], (-1, 1)),
    "mul": (lambda e, x, y: e.mul(x, y), [(2, 3), (2, 3)], (-1, 1)),
    "div": (lambda e, x, y: e.div(x, y), [(2, 3), (2, 3)], (0.5, 2)),
    "max": (lambda e, x, y: e.max(x, y), [(2, 3), (2, 3)], (-1, 1)),
    "neg": (lambda e, x: e.neg(x), [(4,)], (-1, 1)),
    "exp2": (lambda e, x: e.exp2(x), [(4,)], (-1, 1)),
    "log2": (lambda e, x: e.log2(x), [(4,)], (0.5, 2)),
    "sqrt": (lambda e, x: e.sqrt(x), [(4,)], (0.5, 2)),
    "recip": (lambda e, x: e.recip(x), [(4,)], (0.5, 2)),
    "sin": (lambda e, x: e.sin(x), [(4,)], (-3, 3)),
    "cmplt_where": (where_lt, [(2, 3), (2, 3)], (-1, 1)),
    "cast_mask": (cast_mask, [(2, 3), (2, 3)], (-1, 1)),
    "cast_float": (cast_float, [(2, 3)], (-1, 1)),
    "dot": (lambda e, a, b: e.dot(a, b), [(2, 3), (3, 4)], (-1, 1)),
    "dot_batched": (lambda e, a, b: e.dot(a, b), [(2, 2, 3), (2, 3, 2)], (-1, 1)),
    "reduce_sum": (lambda e, x: e.reduce_sum(x, [1]), [(2, 3, 2)], (-1, 1)),
    "reduce_sum_all": (lambda e, x: e.reduce_sum(x, [0, 2]), [(2, 3, 2)], (-1, 1)),
    "reduce_max": (lambda e, x: e.reduce_max(x, [1]), [(2, 3, 2)], (-1, 1)),
    "reduce_max_all": (lambda e, x: e.reduce_max(x, [0, 1]), [(2, 3)], (-1, 1)),
    "reshape": (lambda e, x: e.sin(e.reshape(x, [3, 2])), [(2, 3)], (-1, 1)),
    "permute": (lambda e, x: e.sin(e.permute(x, [2, 0, 1])), [(2, 3, 2)], (-1, 1)),
    "broadcast_rows": (lambda e, x: e.sin(e.broadcast(x, [3, 2])), [(1, 2)], (-1, 1)),
    "broadcast_cols": (lambda e, x: e.sin(e.broadcast(x, [2, 1, 3])), [(2, 1, 1)], (-1, 1)),
    "slice": (lambda e, x: e.slice(x, [1, 0], [3, 2]), [(4, 3)], (-1, 1)),
    "slice_strided": (lambda e, x: e.slice(x, [1, 0], [7, 3], [3, 2]), [(8, 3)], (-1, 1)),
    "slice_strided_ragged": (lambda e, x: e.slice(x, [0], [5], [2]), [(6,)], (-1, 1)),
    "pad": (lambda e, x: e.sin(e.pad(x, [1, 0], [0, 2], 0.5)), [(2, 3)], (-1, 1)),
    "concat": (lambda e, x, y: e.sin(e.concat([x, y, x], 1)), [(2, 1), (2, 2)], (-1, 1)),
}


def composite(name: str) -> Callable[..., SSAValue]:
    ops = {"sigmoid": tg.SigmoidOp, "tanh": tg.TanhOp, "relu": tg.ReluOp}

    def body(e: Emitter, x: SSAValue) -> SSAValue:
        return e.emit(ops[name](x))

    return body


def softmax(dim: int) -> Callable[..., SSAValue]:
    def body(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
        return e.mul(e.emit(tg.SoftmaxOp(x, dim)), w)  # sum(softmax) alone is constant

    return body


COMPOSITES = {
    "sigmoid": (composite("sigmoid"), [(2, 3)], (-3, 3)),
    "tanh": (composite("tanh"), [(2, 3)], (-2, 2)),
    "relu": (composite("relu"), [(2, 3)], (-1, 1)),
    "softmax_0": (softmax(0), [(3, 2), (3, 2)], (-2, 2)),
    "softmax_1": (softmax(1), [(2, 4), (2, 4)], (-2, 2)),
    "reduce_mean": (lambda e, x: e.sin(e.emit(tg.ReduceMeanOp(x, [1]))), [(2, 3, 2)], (-1, 1)),
    "reduce_mean_all": (
        lambda e, x: e.sin(e.emit(tg.ReduceMeanOp(x, [0, 2]))),
        [(2, 3, 2)],
        (-1, 1),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_primitive_gradient(name: str):
    body, shapes, (low, high) = CASES[name]
    check_gradients(body, shapes, low=low, high=high)


@pytest.mark.parametrize("decompose", ["no", "before", "after"])
@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_gradient(name: str, decompose: str):
    body, shapes, (low, high) = COMPOSITES[name]
    check_gradients(body, shapes, low=low, high=high, decompose=decompose)
