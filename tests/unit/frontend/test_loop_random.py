"""Random numbers drawn inside `gradfuse.steps` / `gradfuse.scan` bodies (dropout in a
recurrent decoder, issue 16): new numbers at every step of every run, the same on every
backend; and a param read before its assign and used in a later loop, which the C
backend cannot keep, is an error at the user's line instead of wrong numbers."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.tensor import Tensor
from gradfuse.nn import SGD, Linear
from gradfuse.nn import functional as F
from gradfuse.philox import uniform

RUNS, STEPS, INNER, SEED = 2, 3, 2, 7


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_draws_in_a_loop_are_new_at_every_step_of_every_run(backend: str) -> None:
    """In a steps loop inside ir_for, step t of run r draws at counter r * STEPS + t; in a
    scan nested in it, at (r * STEPS + t) * INNER + u: Philox's numbers, never repeated."""
    got: list[np.ndarray] = []

    def step() -> None:
        loop = gradfuse.steps(STEPS, h=gradfuse.constant(np.zeros(2, np.float32)))
        for _ in loop:
            r = gradfuse.rand(2, seed=SEED)
            _, inner = gradfuse.scan(
                lambda c, x: (c, gradfuse.rand(2, seed=SEED + 1)),
                r,
                r.reshape(1, 2).broadcast_to((INNER, 2)),
            )
            loop.h = loop.h + r
            loop.collect(r=r, inner=inner)
        Receiver(lambda a, b: got.append((a.copy(), b.copy())), [loop.r, loop.inner])

    ir_for(range(RUNS), step)
    execute(backend=backend)
    index = np.arange(2)
    for run, (outer, inner) in enumerate(got):
        for t in range(STEPS):
            np.testing.assert_array_equal(outer[t], uniform(index, run * STEPS + t, SEED))
            for u in range(INNER):
                want = uniform(index, (run * STEPS + t) * INNER + u, SEED + 1)
                np.testing.assert_array_equal(inner[t][u], want)


XS = np.random.default_rng(0).normal(size=(4, 3, 2)).astype(np.float32)


def train(backend: str, form: str) -> list[np.ndarray]:
    """5 SGD steps of a recurrence with dropout on its state; the final parameters."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    cell = Linear(2 + 5, 5)
    opt = SGD(cell.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        x = Feeder(lambda: XS, shape=XS.shape)
        h = gradfuse.constant(np.zeros((3, 5), np.float32))
        if form == "steps":
            loop = gradfuse.steps(4, h=h)
            for t in loop:
                loop.h = F.dropout(cell(gradfuse.cat([x[t], loop.h], 1)).tanh(), 0.3)
            h = loop.h
        else:
            for t in range(4):
                h = F.dropout(cell(gradfuse.cat([x[t], h], 1)).tanh(), 0.3)
        (h * h).sum().backward()
        opt.step()

    ir_for(range(5), step)
    execute(backend=backend)
    return [p.numpy() for p in cell.parameters()]


# Against the reference in float64 (the same masks), the float32 parameters after the 5
# steps are off by at most (relative to each parameter's largest magnitude): steps 5.2e-7
# (reference) / 7.3e-7 (c), unrolled 4.1e-6 / 3.3e-6. So the two float32 runs are within
# 8.2e-6 of each other: RTOL leaves a margin of 2.4x over that bound.
RTOL = 2e-5


@pytest.mark.parametrize("form", ["steps", "unrolled"])
def test_dropout_in_a_loop_body_trains_the_same_on_c_and_reference(form: str) -> None:
    for a, b in zip(train("reference", form), train("c", form)):
        assert np.abs(b - a).max() <= RTOL * np.abs(a).max()


def test_a_param_read_before_its_assign_and_used_in_a_loop_is_an_error_on_c() -> None:
    w = Parameter(np.zeros(2, np.float32), name="w")
    got: list[np.ndarray] = []

    def step() -> None:
        old = Tensor(w.value)
        w.assign(old + 1.0)
        loop = gradfuse.steps(2, h=gradfuse.constant(np.zeros(2, np.float32)))
        for _ in loop:
            loop.h = loop.h + old
        Receiver(lambda v: got.append(v.copy()), loop.h)

    ir_for(range(2), step)
    with pytest.raises(GradfuseError, match='old value of param "w" is read after') as info:
        gradfuse.compile("c")
    assert "test_loop_random.py" in str(info.value)
    execute(backend="reference")  # the recording is kept; the reference keeps the old value
    assert [g.tolist() for g in got] == [[0.0, 0.0], [2.0, 2.0]]


# The golden IR of a draw in a steps body (traced, before any pass): the counter param
# is read before the loop, step t of the 3 draws at c * 3 + t, and the increment (with
# its stop_gradient, as every assign of a computed value) follows the loop.
DRAW_IN_A_LOOP = """func @main() {
  %0 = tg.constant 0.0 : tensor<2xf32>
  %1 = tg.constant 0.0 : tensor<1xf32>
  %2 = tg.param "rng.0" : tensor<f32>
  %3, %4 = tg.for %5 = 0 to 3 step 1 iter(%6 = %0, %7 = %1) : tensor<2xf32>, tensor<1xf32> {
    %8 = tg.constant 3.0 : tensor<f32>
    %9 = tg.mul %2, %8 : tensor<f32>
    %10 = tg.reshape %7 : tensor<f32>
    %11 = tg.add %9, %10 : tensor<f32>
    %12 = tg.random %11 seed=7 : tensor<2xf32>
    %13 = tg.add %6, %12 : tensor<2xf32>
    %14 = tg.constant 1.0 : tensor<1xf32>
    %15 = tg.add %7, %14 : tensor<1xf32>
    tg.yield %13, %15
  }
  %16 = tg.constant 1.0 : tensor<f32>
  %17 = tg.add %2, %16 : tensor<f32>
  tg.assign "rng.0", %17
  %18 = tg.stop_gradient %17 : tensor<f32>
  tg.receiver "receiver", %3
  return
}
"""


def test_the_traced_ir_of_a_draw_in_a_loop() -> None:
    loop = gradfuse.steps(3, h=gradfuse.constant(np.zeros(2, np.float32)))
    for _ in loop:
        loop.h = loop.h + gradfuse.rand(2, seed=SEED)
    Receiver(lambda v: None, loop.h)
    assert gradfuse.ir_text() == DRAW_IN_A_LOOP
