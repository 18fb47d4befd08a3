"""How a recurrent layer's training step fuses (issue 15): launches per time step in
the forward and reverse loops, and the weight gradients summed after the reverse loop.

Counted on the `kernels` pipeline's output (what every backend launches).
"""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, ir_for
from gradfuse.dialects import kernel as K
from gradfuse.frontend.tracing import program
from gradfuse.nn import GRU, LSTM, RNN
from gradfuse.passes import run_pipeline

T, B, IN, H = 6, 4, 5, 8
LAUNCHES = (K.KernelOp, K.GroupOp, K.RowsOp)


def step_loops(layer) -> list[K.ForOp]:
    """The time-step loops of one recorded SGD step of `layer` on an MSE-like loss."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    x = np.random.default_rng(0).uniform(-1, 1, (T, B, IN)).astype(np.float32)

    def step() -> None:
        layer.zero_grad()
        out, _ = layer(Feeder(x, shape=[T, B, IN], name="x"))
        (out * out).mean().backward()
        for p in layer.parameters():
            p.assign(p - 0.1 * p.grad)

    ir_for(range(2), step)
    module = program().module.clone()
    run_pipeline(module, "kernels")
    return [op for op in module.walk() if isinstance(op, K.ForOp) and op.trip_count == T]


def launches(loop: K.ForOp) -> int:
    return sum(isinstance(op, LAUNCHES) for op in loop.body.block.ops)


@pytest.mark.parametrize(
    "make", [lambda: LSTM(IN, H, 2), lambda: GRU(IN, H), lambda: RNN(IN, H, bidirectional=True)]
)
def test_each_time_step_is_one_launch_forward_and_backward(make):
    """Forward: the gate contraction with the cell update as its epilogue, row by row,
    writing its stack slots and its state in place, and the step counter, which each
    row keeps a copy of (`row_private`). Backward: the same, reversed."""
    loops = step_loops(make())
    assert loops and len(loops) % 2 == 0  # one forward and one reverse per layer/direction
    assert [launches(loop) for loop in loops] == [1] * len(loops)
    for loop in loops:
        (rows,) = [op for op in loop.body.block.ops if isinstance(op, K.RowsOp)]
        counters = [k for k in rows.body.block.ops if k.domain_sizes == (B,)]
        assert counters  # the step counters, once per row of the batch
        scatters = [op for op in rows.walk() if isinstance(op, K.ScatterAddOp)]
        assert scatters and all(op.one_slot for op in scatters)  # slots: no atomics


def test_weight_gradients_are_one_contraction_after_each_reverse_loop():
    """No reverse loop computes a [4H, H] weight gradient; each is one contraction over
    all T*B rows after the loop, as cuDNN sums them."""
    loops = step_loops(LSTM(IN, H))
    inside = [k for loop in loops for k in loop.walk() if isinstance(k, K.KernelOp)]
    assert all(k.domain_sizes[: k.num_parallel] != (4 * H, H) for k in inside)
    module = loops[0].parent_op()
    after = [
        k
        for k in module.walk()
        if isinstance(k, K.KernelOp) and k.domain_sizes == (4 * H, H, T * B)
    ]
    assert after, "W_hh's gradient: [4H, H] summed over T*B rows"
