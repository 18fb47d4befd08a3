"""The C of `vector.transfer_write` (`loops-vectorize`'s writes across the lanes): a run
of writes to one buffer prints lane 0 of every write first; a write that may touch an
element of an earlier one in the run (the same indices) starts a new run, so that the
program's order of two writes to one element is kept."""

from __future__ import annotations

import numpy as np
from xdsl.parser import Parser

from gradfuse.backend.c.loop_render import LoopRenderer
from gradfuse.passes import make_context

MAP = "{in_bounds = [true], permutation_map = affine_map<(d0, d1) -> (d0)>}"
WRITES = f"""
func.func @k(%m: memref<16x4xf32>, %a: vector<8xf32>, %b: vector<8xf32>, %c: vector<8xf32>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  vector.transfer_write %a, %m[%c0, %c0] {MAP} : vector<8xf32>, memref<16x4xf32>
  vector.transfer_write %b, %m[%c8, %c0] {MAP} : vector<8xf32>, memref<16x4xf32>
  vector.transfer_write %c, %m[%c0, %c1] {MAP} : vector<8xf32>, memref<16x4xf32>
  vector.transfer_write %a, %m[%c0, %c1] {MAP} : vector<8xf32>, memref<16x4xf32>
  func.return
}}
"""


def rendered(text: str) -> tuple[list[str], list[str]]:
    """The C lines of a function's body, and the C names of its arguments."""
    module = Parser(make_context(), text).parse_module()
    module.verify()
    fn = module.body.block.first_op
    assert fn is not None
    renderer = LoopRenderer()
    renderer.names, renderer.lines = {}, []
    block = fn.regions[0].block
    renderer.block(block.ops, 0)
    return [line.strip() for line in renderer.lines], [renderer.name(a) for a in block.args]


def test_a_run_of_transfer_writes_prints_lane_by_lane_in_program_order_where_they_may_overlap():
    lines, (m, a, b, c) = rendered(WRITES)
    # a (rows 0..7), b (rows 8..15, 8 rows on: disjoint) and c (column 1) in one run
    run = [(a, 0, 0), (b, 8, 0), (c, 0, 1)]
    want = [f"float* p{k} = &{m}[{row} * 4 + {col}];" for k, (_, row, col) in enumerate(run)]
    want += [
        f"p{k}[{4 * lane}] = {v}[{lane}];" for lane in range(8) for k, (v, *_) in enumerate(run)
    ]
    # the last write has c's indices: after all of c, lane by lane
    want += [f"float* p3 = &{m}[0 * 4 + 1];"]
    want += [f"p3[{4 * lane}] = {a}[{lane}];" for lane in range(8)]
    assert lines == want


SELECTS = """
func.func @k(%m: memref<4xi1>, %x: memref<4xf32>, %y: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c4 step %c1 {
    %mask = memref.load %m[%i] : memref<4xi1>
    %v = memref.load %x[%i] : memref<4xf32>
    %a = arith.select %mask, %v, %zero : f32
    %inside = arith.cmpi slt, %i, %c1 : index
    %b = arith.select %inside, %a, %zero : f32
    memref.store %b, %y[%i] : memref<4xf32>
  }
  func.return
}
"""


def test_a_select_on_a_condition_from_data_is_a_blend_and_one_on_indices_stays_a_branch():
    lines, (m, x, y) = rendered(SELECTS)
    assert lines[1:6] == [
        f"int v4 = {m}[v0];",  # the mask, from memory
        f"float v6 = {x}[v0];",
        "float v8 = gf_selectf(v4, v6, 0.0f);",
        "int v10 = v0 < 1;",  # a test of the loop's index
        "float v11 = v10 ? v8 : 0.0f;",
    ]


RELU_GRAD = """
func @relu_grad(%x: tensor<4x3xf32>, %r: tensor<4x3xf32>) -> (tensor<4x3xf32>) {
  %y = tg.relu %x : tensor<4x3xf32>
  %z = tg.mul %y, %r : tensor<4x3xf32>
  %g = tg.grad %z wrt %x : tensor<4x3xf32>
  return %g
}
"""


def test_the_blend_gives_the_bits_of_the_select():
    """A relu's gradient on the c backend: 12 points, the last 4 in the scalar loop that
    `gf_selectf` blends (tests/filecheck/targets/c.tg); its bits equal the reference's,
    -0.0, infinities and a NaN's payload kept."""
    from gradfuse.backend import compile_module
    from gradfuse.frontend.parser import parse_tg

    nan = np.array([0x7FC01234], np.uint32).view(np.float32)[0]
    x = np.array(
        [[-0.0, 0.0, 1.0], [np.inf, -np.inf, 2.0], [-1.0, 5.0, 1e-40], [np.nan, -0.0, 3.0]],
        np.float32,
    )
    r = np.array(
        [[nan, 1.0, -0.0], [-0.0, 3.0, np.inf], [4.0, -0.0, nan], [6.0, 7.0, -np.inf]], np.float32
    )
    runs = [compile_module(parse_tg(RELU_GRAD), b).run(args=(x, r)) for b in ("reference", "c")]
    want, got = (run.results[0] for run in runs)
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))
    assert got.view(np.uint32)[2, 2] == 0x7FC01234 and np.signbit(got[2, 1])
