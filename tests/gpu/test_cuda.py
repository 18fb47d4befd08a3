"""The CUDA backend's runtime against the reference interpreter: a training loop with a
feeder and a receiver, and a failing feeder (on the device of tests/gpu/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from device_under_test import BACKEND_MARKS, ON

from gradfuse.backend import compile_module
from gradfuse.frontend.parser import parse_tg

pytestmark = BACKEND_MARKS

MLP = """
func @main() {
  tg.for %i = 0 to 20 step 1 {
    %x = tg.feeder "x" : tensor<2x8xf32>
    %w = tg.param "w" init=0.1 : tensor<8x8xf32>
    %b = tg.param "b" init=0.2 : tensor<8xf32>
    %z = tg.dot %x, %w : tensor<2x8xf32>
    %br = tg.reshape %b : tensor<1x8xf32>
    %bb = tg.broadcast %br : tensor<2x8xf32>
    %a = tg.add %z, %bb : tensor<2x8xf32>
    %h = tg.sigmoid %a : tensor<2x8xf32>
    %gw, %gb = tg.grad %h wrt %w, %b : tensor<8x8xf32>, tensor<8xf32>
    %lr = tg.constant -0.1 : tensor<8x8xf32>
    %lrb = tg.constant -0.1 : tensor<8xf32>
    %dw = tg.mul %gw, %lr : tensor<8x8xf32>
    %nw = tg.add %w, %dw : tensor<8x8xf32>
    tg.assign "w", %nw
    %db = tg.mul %gb, %lrb : tensor<8xf32>
    %nb = tg.add %b, %db : tensor<8xf32>
    tg.assign "b", %nb
    tg.receiver "h", %h
    tg.yield
  }
  return
}
"""


def test_training_loop_matches_the_reference():
    xs = np.random.default_rng(0).standard_normal((20, 2, 8)).astype(np.float32)
    want = compile_module(parse_tg(MLP), "reference").run(feeders={"x": xs})
    got = compile_module(parse_tg(MLP), ON).run(feeders={"x": xs})
    for key in want.params:
        np.testing.assert_allclose(got.params[key], want.params[key], rtol=1e-5, atol=1e-6)
    assert len(got.received["h"]) == 20
    for a, b in zip(got.received["h"], want.received["h"]):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)


def test_failing_feeder_keeps_the_last_finished_iteration():
    calls = []

    def feeder():
        calls.append(1)
        if len(calls) == 4:
            raise ValueError("no more data")
        return np.ones((2, 8), np.float32)

    from gradfuse.diagnostics import GradfuseError

    with pytest.raises(GradfuseError, match='feeder "x"') as err:
        compile_module(parse_tg(MLP), ON).run(feeders={"x": feeder})
    ref = compile_module(parse_tg(MLP.replace("0 to 20", "0 to 3")), "reference")
    want = ref.run(feeders={"x": np.ones((2, 8), np.float32)})
    np.testing.assert_allclose(err.value.params["w"], want.params["w"], rtol=1e-5)
