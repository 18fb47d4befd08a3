"""tg-autodiff through tg.for: reverse loops, stacks, recomputation, nesting (issue 15).

Gradients are checked against central finite differences in float64 on the reference
interpreter, and the compiled c backend against the reference in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
from _gradcheck import (
    apply,
    build,
    check_gradients,
    loop,
    matrix_rnn,
    ops_named,
    random_inputs,
    run,
)
from xdsl.ir import SSAValue

from gradfuse.backend import compile_module
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.tg.autodiff import TgAutodiffPass

SHAPES = [(2, 3), (2, 3)]


def rnn(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """h <- tanh(h * w + 0.5) three times, from h = x."""
    (h,) = loop(e, 3, [x], lambda b, h: [b.emit(tg.TanhOp(b.add(b.mul(h, w), 0.5)))])
    return h


def two_carried(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """(h, s) <- (sin(h * w), s + h * h): a state and a running sum, 4 iterations."""

    def body(b: Emitter, h: SSAValue, s: SSAValue) -> list[SSAValue]:
        return [b.sin(b.mul(h, w)), b.add(s, b.mul(h, h))]

    h, s = loop(e, 4, [x, e.zeros_like(x)], body)
    return e.add(h, s)


def nested(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """An outer loop of 3 whose body runs an inner loop of 2 on its state."""

    def outer(b: Emitter, h: SSAValue, s: SSAValue) -> list[SSAValue]:
        (h2,) = loop(b, 2, [h], lambda c, a: [c.emit(tg.TanhOp(c.add(c.mul(a, w), s)))])
        return [h2, b.add(s, b.mul(h2, h2))]

    h, s = loop(e, 3, [x, e.zeros_like(x)], outer)
    return e.add(h, s)


def linear_rnn(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """h <- tanh(h @ w.T) over 4 steps, w.T taken in the body (a view chain to sum the
    weight gradient back through after the loop), plus a term using w elementwise."""

    def body(b: Emitter, h: SSAValue) -> list[SSAValue]:
        wt = b.reshape(b.transpose_last2(w), (3, 3))
        return [b.add(b.emit(tg.TanhOp(b.dot(h, wt))), b.mul(h, b.reduce_sum(w, 0)))]

    (h,) = loop(e, 4, [x], body)
    return h


def nested_matmul(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """An outer loop of 2 around an inner matmul recurrence of 3 steps."""

    def outer(b: Emitter, h: SSAValue) -> list[SSAValue]:
        (h2,) = loop(b, 3, [h], lambda c, a: [c.emit(tg.SigmoidOp(c.dot(a, w)))])
        return [b.add(h2, h)]

    (h,) = loop(e, 2, [x], outer)
    return h


def bias_rnn(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """h <- tanh(h @ w + b) over 4 steps, b = w's column sums, broadcast in the body
    (its gradient: a sum over the steps after the loop, back through the views)."""
    b = e.reduce_sum(w, 0)

    def body(c: Emitter, h: SSAValue) -> list[SSAValue]:
        bb = c.broadcast(c.reshape(b, (1, 3)), (2, 3))
        return [c.emit(tg.TanhOp(c.add(c.dot(h, w), bb)))]

    (h,) = loop(e, 4, [x], body)
    return h


@pytest.mark.parametrize("body", [linear_rnn, nested_matmul, bias_rnn])
def test_weight_gradients_summed_after_the_loop_match_finite_differences(body):
    check_gradients(body, [(2, 3), (3, 3)])


def test_the_weight_gradient_is_one_contraction_over_all_steps():
    module = apply(build(linear_rnn, [(2, 3), (3, 3)], grad=True), TgAutodiffPass())
    func = next(iter(module.ops))
    top = [op for op in func.body.block.ops if isinstance(op, tg.DotOp)]
    assert [shape_of(op.lhs) for op in top] == [(3, 8)]  # 4 steps x 2 rows
    reverse = [op for op in func.body.block.ops if isinstance(op, tg.ForOp)][-1]
    assert all(shape_of(op.result) != (3, 3) for op in reverse.walk() if isinstance(op, tg.DotOp))


@pytest.mark.parametrize("body", [rnn, two_carried, nested])
def test_loop_gradients_match_finite_differences(body):
    check_gradients(body, SHAPES)


def test_matmul_recurrence_gradients_match_finite_differences():
    check_gradients(matrix_rnn, [(2, 3), (3, 3)])


def test_recomputing_the_body_gives_the_same_gradients_as_stacking():
    xs = random_inputs(SHAPES, seed=4)
    stacked = apply(build(nested, SHAPES, grad=True), TgAutodiffPass())
    recomputed = apply(build(nested, SHAPES, grad=True), TgAutodiffPass(stack_limit=0))
    a = run(stacked, args=xs, dtype=np.float64).results
    b = run(recomputed, args=xs, dtype=np.float64).results
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12)

    def stacks(module) -> list[tuple[int, ...]]:
        return sorted(shape_of(op.result) for op in ops_named(module, "tg.scatter_add"))

    # the outer loop stacks its two carried values either way; stacking also keeps
    # the tanh results of the inner loop and h2 * h2's operand h2 of the outer body
    assert len(stacks(recomputed)) < len(stacks(stacked))


def six_steps(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """h <- sigmoid(h @ w) + h * 0.5 over 6 steps (x: 2x3, w: 3x3)."""
    step = lambda b, h: [b.add(b.emit(tg.SigmoidOp(b.dot(h, w))), b.mul(h, 0.5))]  # noqa: E731
    (h,) = loop(e, 6, [x], step)
    return h


@pytest.mark.parametrize(
    ("body", "shapes", "limit", "k"),
    [(two_carried, SHAPES, 100, 2), (six_steps, [(2, 3), (3, 3)], 150, 2)],
)
def test_checkpoints_every_k_steps_give_the_gradients_of_stacking(body, shapes, limit, k):
    """Past `limit` bytes of stacks, the loop becomes n/k iterations around k (a
    checkpoint every k): the same ops on the same values, so float64 agrees to 1e-12."""
    xs = random_inputs(shapes, seed=5)
    stacked = apply(build(body, shapes, grad=True), TgAutodiffPass())
    split = apply(build(body, shapes, grad=True), TgAutodiffPass(stack_limit=limit))
    a = run(stacked, args=xs, dtype=np.float64).results
    b = run(split, args=xs, dtype=np.float64).results
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12)
    n = {two_carried: 4, six_steps: 6}[body]
    loops = sorted(op.trip_count for op in ops_named(split, "tg.for"))
    assert loops == sorted([n // k, k, n // k, k, k])  # forward; reverse: recompute, reverse


def test_a_value_yielded_unchanged_and_an_outside_value_yielded():
    def body(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
        a, b = loop(e, 3, [x, w], lambda c, a, b: [b, c.mul(a, w)])
        return e.add(a, b)

    check_gradients(body, SHAPES)


def test_zero_trip_loop_passes_the_cotangent_to_its_inits():
    def body(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
        (h,) = loop(e, 0, [x], lambda b, h: [b.mul(h, w)])
        return e.mul(h, w)

    check_gradients(body, SHAPES)


def test_loop_with_a_feeder_in_its_body_is_an_error_at_the_feeder():
    def body(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
        def step(b: Emitter, h: SSAValue) -> list[SSAValue]:
            fed = b.emit(tg.FeederOp("x", h.type))
            return [b.mul(h, fed)]

        (h,) = loop(e, 2, [x], step)
        return h

    with pytest.raises(GradfuseError, match=r"model.py:\d+:1: .*whose body has tg.feeder"):
        apply(build(body, SHAPES, grad=True), TgAutodiffPass())


@pytest.mark.c_numeric
@pytest.mark.parametrize("body", [rnn, two_carried, nested])
def test_loop_gradients_on_c_equal_the_reference(body):
    """float32 on c against float32 on reference: the same ops in the same order
    but for FMA contraction and vectorised sums over 6 elements, so a few ulps."""
    xs = [a.astype(np.float32) for a in random_inputs(SHAPES, seed=1)]
    want = compile_module(build(body, SHAPES, grad=True), "reference").run(args=xs).results
    got = compile_module(build(body, SHAPES, grad=True), "c").run(args=xs).results
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
