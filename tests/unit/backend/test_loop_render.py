"""The C of `vector.transfer_write` (`loops-vectorize`'s writes across the lanes): a run
of writes to one buffer prints lane 0 of every write first; a write that may touch an
element of an earlier one in the run (the same indices) starts a new run, so that the
program's order of two writes to one element is kept."""

from __future__ import annotations

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
