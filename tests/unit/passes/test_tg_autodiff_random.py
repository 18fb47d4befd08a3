"""Random chains of elementwise ops, broadcasts and views: tg-autodiff vs. finite differences."""

from __future__ import annotations

import numpy as np
from _gradcheck import check_gradients
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.ir import SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.dialects.tg_builder import Emitter

STEPS = [
    "sin", "tanh", "sigmoid", "neg", "square", "mul_y", "add_y", "max_y", "softmax",
    "permute", "slice", "reshape", "reduce_sum", "pad", "concat",
]  # fmt: skip


def apply_step(e: Emitter, step: str, v: SSAValue, y: SSAValue, choice: int) -> SSAValue:
    """One step of a random program; steps that do not fit `v`'s shape fall back to sin."""
    shape = shape_of(v)
    rank = len(shape)
    dim = choice % rank if rank else 0
    if step in ("mul_y", "add_y", "max_y") and shape == shape_of(y):
        op = {"mul_y": e.mul, "add_y": e.add, "max_y": e.max}[step]
        return op(v, y)
    if step == "tanh":
        return e.emit(tg.TanhOp(v))
    if step == "sigmoid":
        return e.emit(tg.SigmoidOp(v))
    if step == "neg":
        return e.neg(v)
    if step == "square":
        return e.mul(v, v)
    if step == "softmax" and rank:
        return e.emit(tg.SoftmaxOp(v, dim))
    if step == "permute" and rank >= 2:
        return e.permute(v, [*range(1, rank), 0])
    if step == "slice" and rank and shape[dim] >= 2:
        limits = list(shape)
        starts = [1 if i == dim else 0 for i in range(rank)]
        strides = [2 if i == dim else 1 for i in range(rank)]
        return e.slice(v, starts, limits, strides)
    if step == "reshape" and rank:
        return e.reshape(v, [int(np.prod(shape))])
    if step == "reduce_sum" and rank >= 2:
        # reduce, then broadcast back so the shape (and y) still fit
        return e.expand_reduced(e.reduce_sum(v, [dim]), shape, [dim])
    if step == "pad" and rank:
        return e.pad(v, [1 if i == dim else 0 for i in range(rank)], [0] * rank, 0.25)
    if step == "concat" and rank:
        return e.concat([v, e.sin(v)], dim)
    return e.sin(v)


@st.composite
def programs(draw: st.DrawFn):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    y_shape = tuple(n if draw(st.booleans()) else 1 for n in shape)
    steps = draw(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 5)), max_size=6))
    decompose = draw(st.sampled_from(["no", "before", "after"]))
    return shape, y_shape, steps, decompose


@settings(max_examples=25, deadline=None)
@given(programs())
def test_random_program_gradients(program):
    shape, y_shape, steps, decompose = program

    def body(e: Emitter, x: SSAValue, y_small: SSAValue) -> SSAValue:
        y = e.broadcast(y_small, shape)  # y's gradient reduces back to y_shape
        v = e.mul(x, y)
        for step, choice in steps:
            v = apply_step(e, step, v, y, choice)
        return v

    check_gradients(body, [shape, y_shape], decompose=decompose, rtol=1e-5, atol=1e-6)
