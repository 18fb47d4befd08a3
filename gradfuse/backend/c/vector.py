"""The sums of a packed segment (see `pack`) in vector registers, several indices of its
shared dim at a time.

After packing, a convolution's sums are `acc[l] += p[k][l] * w(k, co)` for each output
channel co: one vector multiply-add per row k, whose latency would bound the loop. Here
BLOCK neighbouring channels share each row's vector loads (a row of several vectors where
the pack's rows are wider), each with its own accumulators (independent chains: register
blocking), written in gcc's vector extensions so that the accumulators stay in registers.
What does not depend on the channel runs once per row; each channel's code is its own
scope, where `i1` is that channel, and a read whose only index that depends on it is its
own reads through a pointer at the block's first channel:

    for (long i1b = 0; i1b < 64; i1b += 8) {
      gf_v a0_0_0 = (gf_v){0} + v8, ... a0_7_0 = (gf_v){0} + v8;
      for (long gf_row = 0; gf_row < gf_rows; gf_row++) {
        long v24 = v23k[gf_row];
        gf_v gf_p0 = *(gf_v*)&v23p[v24 * 16 + 0];
        const float* gf_w0 = &v1[(v24 / 16) * 1024 + i1b * 16 + (v24 / 4 % 4) * 4 + (v24 % 4)];
        {
          const long i1 = i1b + 1;
          float v92 = gf_w0[16];
          { gf_v v94 = gf_p0 * v92; gf_v v95 = a0_1_0 + v94; a0_1_0 = v95; }
        }
        ...
      }
      float gf_sum0[8][16];
      *(gf_v*)&gf_sum0[0][0] = a0_0_0;
      ...
      for (long gf_t = 0; gf_t < 8; gf_t++)
      for (long gf_s = 0; gf_s < 1; gf_s++) {
        const long i1 = i1b + gf_t;
        for (long l = 0; l < n; l++) { ... the epilogue, gf_sum0[gf_t][gf_s * 16 + l] ... }
      }
    }
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from gradfuse.backend.c.lanes import LANES, LaneRenderer
from gradfuse.backend.c.pack import VECTOR, Plan, dependent, varies
from gradfuse.backend.cstyle import Renderer, ctype

if TYPE_CHECKING:
    from gradfuse.backend.c.loops import Segment

BLOCK = 8  # indices of the shared dim at a time (accumulators in registers)
ACCUMULATORS = 16  # vectors of sums at a time, at most


def _vector_op(r: Renderer, op: Operation, depth: int) -> None:
    a = [r.name(v) for v in op.operands]
    res = r.name(op.results[0])
    if isinstance(op, arith.NegfOp):
        r.emit(f"gf_v {res} = -{a[0]};", depth)
    else:
        r.emit(f"gf_v {res} = {a[0]} {VECTOR[type(op)]} {a[1]};", depth)  # type: ignore[index]


def rows(r: Renderer, p: Plan, depth: int) -> int:
    """Opens the loop over the rows of the pack that the sums add (with `{`): the rows
    that are not all zero where `sparse`, else the nest; returns the body's depth."""
    if not p.sparse:
        return p.nest.open(r, depth)
    k = r.name(p.nest.iv)
    base = p.buffer(p.packed[0])[:-1]
    r.emit("for (long gf_row = 0; gf_row < gf_rows; gf_row++) {", depth)
    r.emit(f"long {k} = {base}k[gf_row];", depth + 1)
    p.nest.name_from(r, k)
    return depth + 1


def render_sums(r: Renderer, seg: Segment, p: Plan, varying: set[SSAValue]) -> None:
    """Emits the sums of a packed segment at depth 2: the loop over dim j, BLOCK indices at
    a time (or the most fewer that divide the dim: 7 of 700, 5 of 20; at most ACCUMULATORS
    vectors: each index its own sums, so the order of each sum is the same), each row of
    the pack in `p.row / LANES` vectors (one where the row is narrower)."""
    width = min(p.row, LANES)
    vectors = p.row // width
    size = seg.dims[p.j] if p.j is not None else 1
    block = next(b for b in range(BLOCK, 0, -1) if size % b == 0 and b * vectors <= ACCUMULATORS)
    body = p.loop.body.block
    depth = 2
    vec = f"vector_size({4 * width}), aligned(4), may_alias"
    r.emit(f"typedef float gf_v __attribute__(({vec}));", depth)
    if p.j is not None:
        j = f"i{p.j}"
        r.emit(f"for (long {j}b = 0; {j}b < {size}; {j}b += {block}) {{", depth)
        depth += 1
    for c, init in enumerate(p.loop.iter_args):
        accs = [
            f"a{c}_{t}_{u} = (gf_v){{0}} + {r.name(init)}"
            for t in range(block)
            for u in range(vectors)
        ]
        r.emit(f"gf_v {', '.join(accs)};", depth)
    inner = rows(r, p, depth)
    k = r.name(p.nest.iv)
    for v in p.packed:
        for u in range(vectors):
            r.emit(f"gf_v gf_p{u} = *(gf_v*)&{p.buffer(v)}[{k} * {p.row} + {u * width}];", inner)
    scalars = [op for op in p.compute if not varies(op, varying)]
    dep = dependent(seg, p.loop, p.j, carried=False) if p.j is not None else set()
    for op in scalars:  # the same for each index of dim j: once per row
        if not any(v in dep for v in op.results):
            r.op(op, inner)
    strided = _strided(
        r, p, [op for op in scalars if any(v in dep for v in op.results)], dep, inner
    )
    saved = dict(r.names)
    y = body.last_op
    yields = list(y.operands) if y is not None else []
    for t in range(block):
        r.emit("{", inner)
        if p.j is not None:
            r.emit(f"const long i{p.j} = i{p.j}b + {t};", inner + 1)
        for op in scalars:
            if op in strided:
                base, stride = strided[op]
                r.emit(
                    f"{ctype(op.results[0].type)} {r.name(op.results[0])} = {base}[{t * stride}];",
                    inner + 1,
                )
            elif any(v in dep for v in op.results):
                r.op(op, inner + 1)
        for u in range(vectors):
            r.emit("{", inner + 1)
            for v in p.packed:
                r.names[v] = f"gf_p{u}"
            for c, arg in enumerate(body.args[1:]):
                r.names[arg] = f"a{c}_{t}_{u}"
            for op in p.compute:
                if varies(op, varying):
                    _vector_op(r, op, inner + 2)
            for c, v in enumerate(yields):
                r.emit(f"a{c}_{t}_{u} = {r.name(v)};", inner + 2)
            r.emit("}", inner + 1)
        r.emit("}", inner)
        r.names = dict(saved)
    r.emit("}", depth)
    for c in range(len(p.loop.results)):  # the sums, then the epilogue as a loop (less code)
        r.emit(f"float gf_sum{c}[{block}][{p.row}];", depth)
        for t in range(block):
            for u in range(vectors):
                r.emit(f"*(gf_v*)&gf_sum{c}[{t}][{u * width}] = a{c}_{t}_{u};", depth)
    r.emit(f"for (long gf_t = 0; gf_t < {block}; gf_t++)", depth)
    r.emit(f"for (long gf_s = 0; gf_s < {p.subs}; gf_s++) {{", depth)
    if p.j is not None:
        r.emit(f"const long i{p.j} = i{p.j}b + gf_t;", depth + 1)
    if p.subs > 1:
        r.emit(f"const long i{p.sub} = {p.sub_index('gf_s')};", depth + 1)
    for c, res in enumerate(p.loop.results):
        r.names[res] = f"gf_sum{c}[gf_t][gf_s * {p.lanes} + l]"
    LaneRenderer(r, varying).block(p.after, depth + 1, [])
    r.emit("}", depth)
    r.names = dict(saved)
    if p.j is not None:
        r.emit("}", 2)


def _strided(
    r: Renderer, p: Plan, ops: list[Operation], dep: set[SSAValue], depth: int
) -> dict[Operation, tuple[str, int]]:
    """The loads of `ops` (those that depend on dim j) whose only index that depends on j
    is j's own: each gets a pointer at j's first index of the block (emitted here, once
    per row), and the index of dim j `t` further reads `pointer[t * stride]`."""
    out: dict[Operation, tuple[str, int]] = {}
    for op in ops:
        if not isinstance(op, memref.LoadOp):
            continue
        own = [q for q, v in enumerate(op.indices) if r.names.get(v) == f"i{p.j}"]
        others = [v for q, v in enumerate(op.indices) if q not in own]
        if len(own) != 1 or any(v in dep for v in others):
            continue
        ty = op.memref.type
        assert isinstance(ty, MemRefType)
        stride = prod(ty.get_shape()[own[0] + 1 :])
        j = op.indices[own[0]]
        name, r.names[j] = r.names[j], f"i{p.j}b"
        base = f"gf_w{len(out)}"
        r.emit(
            f"const {ctype(op.results[0].type)}* {base} = &{p.nest.index(r, op.memref, op.indices)};",
            depth,
        )
        r.names[j] = name
        out[op] = (base, stride)
    return out
