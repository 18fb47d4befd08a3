"""Row-private step counters (`kernel-fuse-rows` with `row_private`): a recurrence over
rows is one launch per time step forward and backward, and computes what the
reference computes."""

from __future__ import annotations

import numpy as np
import pytest
from _gradcheck import build, matrix_rnn, random_inputs

from gradfuse.backend import compile_module
from gradfuse.dialects import kernel as K
from gradfuse.dialects.kernel_host import ParamOp
from gradfuse.passes import run_pipeline

SHAPES = [(3, 4), (4, 4)]  # matrix_rnn over a batch of 3 rows, a [4, 4] weight


def test_each_time_step_is_one_launch_with_a_counter_per_row():
    module = build(matrix_rnn, SHAPES, grad=True)
    run_pipeline(module, "kernels")
    loops = [op for op in module.walk() if isinstance(op, K.ForOp)]
    assert len(loops) == 2  # forward and reverse
    for body in (f.body.block for f in loops):
        launches = [op for op in body.ops if isinstance(op, K.KernelOp | K.GroupOp | K.RowsOp)]
        assert len(launches) == 1 and isinstance(launches[0], K.RowsOp)
        assert not any(
            k.domain_sizes == (1,) for k in launches[0].walk() if isinstance(k, K.KernelOp)
        )
    counters = [
        p for p in module.walk() if isinstance(p, ParamOp) and p.result.type.get_shape() == (3,)
    ]
    assert len(counters) == 2  # the forward and the reverse step counter, 3 copies each


@pytest.mark.c_numeric
@pytest.mark.parametrize("backend", ["numpy", "lowered", "c"])
def test_row_private_counters_give_the_reference_gradients(backend):
    """float32 against the float32 reference. The tolerance, from a float64 run of the
    same program (seed 2): float32 rounding leaves the reference within 4.4e-7 relative
    of float64 (gradients 0.4 to 16), and the three backends within 1.9e-6 absolute of
    the float32 reference; FMA and another vector width reorder sums of 4 products,
    which stays within a few times that. rtol 1e-5 with atol 1e-6 leaves 5x or more."""
    xs = [a.astype(np.float32) for a in random_inputs(SHAPES, seed=2)]
    want = compile_module(build(matrix_rnn, SHAPES, grad=True), "reference").run(args=xs).results
    got = compile_module(build(matrix_rnn, SHAPES, grad=True), backend).run(args=xs).results
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
