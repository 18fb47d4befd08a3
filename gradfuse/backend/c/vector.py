"""The sums of a packed segment (see `pack`) in vector registers, several indices of its
shared dim at a time.

After packing, a convolution's sums are `acc[l] += p[k][l] * w(k, co)` for each output
channel co: one vector multiply-add per row k, whose latency would bound the loop. Here
BLOCK neighbouring channels share each row's vector load, each with its own accumulator
(independent chains: register blocking), written in gcc's vector extensions so that the
accumulators stay in registers. Each channel's code is its own scope, where `i1` is that
channel, so the scalar ops render as they are:

    for (long i1b = 0; i1b < 64; i1b += 8) {
      gf_v a0_0 = (gf_v){0} + v8, ... a0_7 = (gf_v){0} + v8;
      for (long gf_row = 0; gf_row < gf_rows; gf_row++) {
        long v25 = v95k[gf_row];
        gf_v v95 = *(gf_v*)&v95p[v25 * 16];
        {
          const long i1 = i1b + 0;
          float v67 = v1[(v25 / 16) * 1024 + i1 * 16 + (v25 / 4 % 4) * 4 + (v25 % 4)];
          gf_v v96 = v95 * v67;
          gf_v v68 = a0_0 + v96;
          a0_0 = v68;
        }
        ...
      }
      {
        const long i1 = i1b + 0;
        float v23[16];
        *(gf_v*)v23 = a0_0;
        for (long l = 0; l < n; l++) { ... the epilogue ... }
      }
      ...
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import Float32Type
from xdsl.ir import Operation, SSAValue

from gradfuse.backend.c.lanes import LANES, LaneRenderer
from gradfuse.backend.cstyle import Renderer

if TYPE_CHECKING:
    from gradfuse.backend.c.loops import Segment
    from gradfuse.backend.c.pack import Plan

VECTOR = {arith.AddfOp: "+", arith.SubfOp: "-", arith.MulfOp: "*", arith.DivfOp: "/"}
BLOCK = 8  # indices of the shared dim at a time (accumulators in registers)


def _varies(op: Operation, varying: set[SSAValue]) -> bool:
    return any(r in varying for r in op.results)


def vectorizable(p: Plan, varying: set[SSAValue]) -> bool:
    """Whether the sums of `p` are f32 arithmetic on the packed rows, carried values and
    scalars only (what gcc's vector extensions express)."""
    if p.inner or not all(isinstance(v.type, Float32Type) for v in p.packed):
        return False
    carried = set(p.loop.body.block.args[1:])
    for res, init in zip(p.loop.results, p.loop.iter_args):
        if not isinstance(res.type, Float32Type) or init in varying:
            return False
    vectors = set(p.packed) | carried
    for op in p.compute:
        if not _varies(op, varying):
            continue
        if type(op) not in VECTOR and not isinstance(op, arith.NegfOp):
            return False
        if not isinstance(op.results[0].type, Float32Type):
            return False
        if any(v in varying and v not in vectors for v in op.operands):
            return False
        vectors.update(op.results)
    return True


def _vector_op(r: Renderer, op: Operation, depth: int) -> None:
    a = [r.name(v) for v in op.operands]
    res = r.name(op.results[0])
    if isinstance(op, arith.NegfOp):
        r.emit(f"gf_v {res} = -{a[0]};", depth)
    else:
        r.emit(f"gf_v {res} = {a[0]} {VECTOR[type(op)]} {a[1]};", depth)  # type: ignore[index]


def render_sums(r: Renderer, seg: Segment, p: Plan, varying: set[SSAValue], lanes: int) -> None:
    """Emits the loop over dim j of a packed segment, BLOCK indices at a time (or the
    largest power of two below that divides the dim), at depth 2."""
    from gradfuse.backend.c.pack import rows

    size = seg.dims[p.j]
    block = next(b for b in (BLOCK, 4, 2, 1) if size % b == 0)
    j = f"i{p.j}"
    body = p.loop.body.block
    r.emit(f"for (long {j}b = 0; {j}b < {size}; {j}b += {block}) {{", 2)
    for c, init in enumerate(p.loop.iter_args):
        accs = ", ".join(f"a{c}_{t} = (gf_v){{0}} + {r.name(init)}" for t in range(block))
        r.emit(f"gf_v {accs};", 3)
    depth = rows(r, p, 3)
    k = r.name(p.nest.iv)
    for v in p.packed:
        r.emit(f"gf_v {r.name(v)} = *(gf_v*)&{p.buffer(v)}[{k} * {lanes}];", depth)
    saved = dict(r.names)
    y = body.last_op
    yields = list(y.operands) if y is not None else []
    for t in range(block):
        r.emit("{", depth)
        r.emit(f"const long {j} = {j}b + {t};", depth + 1)
        for c, arg in enumerate(body.args[1:]):
            r.names[arg] = f"a{c}_{t}"
        for op in p.compute:
            if _varies(op, varying):
                _vector_op(r, op, depth + 1)
            else:
                r.op(op, depth + 1)
        for c, v in enumerate(yields):
            r.emit(f"a{c}_{t} = {r.name(v)};", depth + 1)
        r.emit("}", depth)
        r.names = dict(saved)
    r.emit("}", 3)
    for t in range(block):
        r.emit("{", 3)
        r.emit(f"const long {j} = {j}b + {t};", 4)
        for c, res in enumerate(p.loop.results):
            array = r.name(res)
            r.emit(f"float {array}[{LANES}];", 4)
            r.emit(f"*(gf_v*){array} = a{c}_{t};", 4)
            r.names[res] = f"{array}[l]"
        LaneRenderer(r, varying).block(p.after, 4, [])
        r.emit("}", 3)
        r.names = dict(saved)
    r.emit("}", 2)
