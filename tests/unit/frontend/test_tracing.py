"""The recording model: loops, feeders, receivers, params across blocks, reset."""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, Tensor, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import SGD, Linear


def test_tensor_holds_only_an_ssa_value() -> None:
    assert Tensor.__slots__ == ("_value", "_leaf")  # (or the Parameter of requires_grad_())
    x = Feeder(lambda: np.zeros(3, np.float32), shape=[3])
    assert str(x.value.type) == "tensor<3xf32>" and x.shape == (3,)


def test_ir_for_traces_once_and_reads_params_in_the_body() -> None:
    w = Parameter(np.ones(3, np.float32), name="w")
    calls: list[int] = []

    def body() -> None:
        calls.append(1)
        w.assign(w * 0.5)

    _ = w + 1.0  # a read before the loop
    ir_for(range(0, 10, 2), body)
    _ = w + 1.0  # a fresh read after it
    assert calls == [1]
    text = gradfuse.ir_text()
    assert re.search(r"tg\.for %\d+ = 0 to 10 step 2 \{", text)
    assert text.count('tg.param "w"') == 3
    assert re.search(r'tg\.for .*\{\n    %\d+ = tg\.param "w"', text)
    execute()
    np.testing.assert_allclose(w.data, np.full(3, 0.5**5))


def test_nested_loops_and_receivers_inside() -> None:
    w = Parameter(np.zeros(2, np.float32), name="counter")
    seen: list[float] = []

    def inner() -> None:
        w.assign(w + 1.0)

    def outer() -> None:
        ir_for(range(3), inner)
        Receiver(lambda v: seen.append(float(v[0])), [w], name="count")

    ir_for(range(4), outer)
    execute()
    assert seen == [3.0, 6.0, 9.0, 12.0]
    np.testing.assert_array_equal(w.data, [12.0, 12.0])


def test_feeders_are_called_each_iteration_with_unique_keys() -> None:
    values = iter(range(100))
    got: list[float] = []

    def body() -> None:
        a = Feeder(lambda: np.full(2, next(values), np.float32), shape=[2])
        b = Feeder(lambda: np.full(2, 10.0, np.float32), shape=[2])
        Receiver(lambda s: got.append(float(s[0])), a + b, name="sum")

    ir_for(range(3), body)
    text = gradfuse.ir_text()
    assert 'tg.feeder "feeder"' in text and 'tg.feeder "feeder_1"' in text
    execute()
    assert got == [10.0, 11.0, 12.0]


def test_failed_trace_leaves_no_partial_loop() -> None:
    def body() -> None:
        Feeder(lambda: np.zeros(2, np.float32), shape=[2]) @ Feeder(
            lambda: np.zeros(3, np.float32), shape=[3]
        )

    with pytest.raises(GradfuseError, match="tg.dot"):
        ir_for(range(3), body)
    assert "tg.for" not in gradfuse.ir_text()


def test_reset_and_ir_text_after_the_pipeline() -> None:
    model = Linear(2, 2)
    model(Feeder(lambda: np.ones((1, 2), np.float32), shape=[1, 2])).sigmoid().backward()
    Receiver(lambda g: None, [model.weight.grad], name="grad")  # keeps the gradient alive
    assert "tg.grad" in gradfuse.ir_text()
    after = gradfuse.ir_text(after="tg")
    assert "tg.grad" not in after and "tg.sigmoid" not in after and "tg.exp2" in after
    gradfuse.reset()
    assert "tg." not in gradfuse.ir_text()


def test_manual_seed_makes_training_reproducible() -> None:
    def train() -> dict[str, np.ndarray]:
        gradfuse.reset()
        gradfuse.manual_seed(123)
        model = Linear(3, 3)
        opt = SGD(model.parameters(), lr=0.1)

        def step() -> None:
            opt.zero_grad()
            model(Feeder(lambda: np.ones((2, 3), np.float32), shape=[2, 3])).tanh().sum().backward()
            opt.step()

        ir_for(range(5), step)
        execute()
        return model.state_dict()

    a, b = train(), train()
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_backward_without_zero_grad_accumulates_within_a_block() -> None:
    w = Parameter(np.array([2.0], np.float32), name="w")
    (w * 3.0).backward()
    (w * 4.0).backward()
    assert w.grad is not None
    Receiver(lambda g: None, [w.grad], name="g")
    result = execute()
    np.testing.assert_allclose(result.received["g"][0][0], [7.0])
