"""Register blocking across points: a kernel body run for LANES neighbouring points at once.

Where a kernel's reduction reads memory that is contiguous (or the same) across
neighbouring points of its innermost dimension, as the weight of a contraction
`y[i, j] = sum_k x[i, k] * w[k, j]` is across j, the CPU renderer computes a block of
LANES points together: values that differ between the points are arrays of LANES
(accumulators stay in registers), values that do not stay scalars, and every run of
per-point ops is one short loop over the lanes, which gcc turns into vector code:

    for (long b = 0; b < 128; b += 16) {
      const long n = 128 - b < 16 ? 128 - b : 16;
      float v15[16];
      for (long l = 0; l < n; l++) { v15[l] = v9; }
      for (long v17 = 0; v17 < 64; v17 += 1) {
        float v18 = v0[i0 * 1024 + v17];                 // the same for every lane
        for (long l = 0; l < n; l++) { float v19 = v1[v17 * 128 + (b + l)]; ... v15[l] = v21; }
      }
      for (long l = 0; l < n; l++) { ... v3[i0 * 128 + (b + l)] = v24; }
    }
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import scf
from xdsl.ir import Block, Operation, SSAValue

from gradfuse.backend.cstyle import Renderer, ctype

LANES = 16
WIDE = 64
"""Lanes of a plain lane block (no pack): four vectors of independent sums, so that a
long reduction's multiply-adds do not wait on one another."""


def lane_count(count: int, width: int = LANES) -> str:
    """The lanes of the block at `b` of a dim of `count` points, blocks of `width`, as C:
    a constant where every block is full (or the only one), so that gcc unrolls."""
    if count % width == 0:
        return str(width)
    if count < width:
        return str(count)
    return f"{count} - b < {width} ? {count} - b : {width}"


def lane_values(block: Block, index: SSAValue) -> set[SSAValue] | None:
    """The values under `block` that differ between lanes (those computed from `index`),
    or None when the block branches (lane loops are straight-line code)."""
    varying: set[SSAValue] = {index}
    size = 0
    while size != len(varying):  # loop-carried values vary through their yield: once per
        size = len(varying)  # level of nesting, so until nothing changes
        for op in block.walk():
            if isinstance(op, scf.ForOp):
                y = op.body.block.last_op
                yields = list(y.operands) if isinstance(y, scf.YieldOp) else []
                for k, res in enumerate(op.results):
                    if op.iter_args[k] in varying or (k < len(yields) and yields[k] in varying):
                        varying |= {res, op.body.block.args[k + 1]}
            elif any(v in varying for v in op.operands):
                varying |= set(op.results)
    if any(isinstance(op, scf.IfOp) for op in block.walk()):
        return None  # a branch is rendered whole: lane loops stay straight-line code
    return varying


class LaneRenderer:
    """Renders a block of a segment in lane mode, through its CPU renderer's op cases."""

    def __init__(
        self,
        renderer: Renderer,
        varying: set[SSAValue],
        keep: set[SSAValue] | None = None,
        width: int = LANES,
    ):
        self.r = renderer
        self.varying = varying
        self.keep = keep or set()  # read elsewhere under other names: never arrays
        self.width = width  # the most lanes of a block (the arrays' size)

    def block(self, ops: list[Operation], depth: int, assigns: list[tuple[str, SSAValue]]) -> None:
        """Scalar ops as they come, varying ones gathered into lane loops; `assigns`
        (carried array <- value) close the last lane loop, as a loop body's yield."""
        run: list[Operation] = []
        for op in ops:
            if isinstance(op, scf.YieldOp):
                continue
            if isinstance(op, scf.ForOp) and any(r in self.varying for r in op.results):
                self.flush(run, depth, [])
                run = []
                self.loop(op, depth)
            elif any(r in self.varying for r in op.results) or (
                not op.results and any(v in self.varying for v in op.operands)
            ):
                run.append(op)
            else:
                self.r.op(op, depth)  # the same for every lane: depends on no lane value
        self.flush(run, depth, assigns)

    def flush(self, run: list[Operation], depth: int, assigns: list[tuple[str, SSAValue]]) -> None:
        if not run and not assigns:
            return
        inside = set(run)
        arrays = [
            v
            for op in run
            for v in op.results
            if v not in self.keep and any(use.operation not in inside for use in v.uses)
        ]
        for v in arrays:
            self.r.emit(f"{ctype(v.type)} {self.r.name(v)}[{self.width}];", depth)
            self.r.names[v] = f"{self.r.names[v]}[l]"
        self.r.emit("for (long l = 0; l < n; l++) {", depth)
        for op in run:
            array = any(v in arrays for v in op.results)
            self.r.declare = not array
            self.r.op(op, depth + 1)
            self.r.declare = True
        for target, value in assigns:
            self.r.emit(f"{target} = {self.r.name(value)};", depth + 1)
        self.r.emit("}", depth)

    def loop(
        self,
        op: scf.ForOp,
        depth: int,
        ops: list[Operation] | None = None,
        header: Callable[[int], int] | None = None,
    ) -> None:
        """A loop whose carried values vary: arrays of LANES, the body in lane mode; `ops`
        of the body only, where given, and the loop header from `header(depth)` (which
        opens a brace and returns the body's depth), where given."""
        body = op.body.block
        iv, carried = body.args[0], body.args[1:]
        inits = []
        for res, init, arg in zip(op.results, op.iter_args, carried):
            name = self.r.name(res)
            self.r.emit(f"{ctype(res.type)} {name}[{self.width}];", depth)
            self.r.names[res] = self.r.names[arg] = f"{name}[l]"
            inits.append((f"{name}[l]", init))
        self.r.emit("for (long l = 0; l < n; l++) {", depth)
        for target, init in inits:
            self.r.emit(f"{target} = {self.r.name(init)};", depth + 1)
        self.r.emit("}", depth)
        if header is None:
            i, lo, hi, st = (self.r.name(v) for v in (iv, op.lb, op.ub, op.step))
            self.r.emit(f"for (long {i} = {lo}; {i} < {hi}; {i} += {st}) {{", depth)
            inner = depth + 1
        else:
            inner = header(depth)
        y = body.last_op
        yields = list(y.operands) if isinstance(y, scf.YieldOp) else []
        assigns = [(self.r.name(res), v) for res, v in zip(op.results, yields)]
        self.block(list(body.ops) if ops is None else ops, inner, assigns)
        self.r.emit("}", depth)
