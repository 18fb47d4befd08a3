"""The C of a packed segment (see `pack`): per block of lanes, the pack, then the sums.

The reduction index is split into the loops of its `k / C`, `k % C` reads (see `nest`);
the pack runs them in the order that leaves least to compute for each lane innermost
(the channel: the bounds tests hang on the kernel row and column only), each lane's share
of the rest hoisted out of it, and leaves out the kernel rows and columns that no lane
reads, by the tests common to the lanes and then by each lane's (a transposed
convolution's lanes are its stride apart, so that a kernel column serves all or none):

    for (long v24_1 = 0; v24_1 < 4; v24_1++)
    for (long v24_2 = 0; v24_2 < 4; v24_2++) {
      ...
      int gf_live = v59 & v49 & v45;                 // the kernel row is inside the image
      if (gf_live) {
        int v66[16]; ... for (long l = 0; l < n; l++) { ...; v66[l] = ...; }  // per lane
        gf_live = 0; for (long l = 0; l < n; l++) gf_live |= v66[l];
        if (gf_live) {
          for (long v24_0 = 0; v24_0 < 128; v24_0++) {
            long v24 = ((v24_0) * 4 + v24_1) * 4 + v24_2;
            for (long l = 0; l < n; l++) { ...; v23p[v24 * 16 + l] = v23; }
            int gf_any = 0; for (...) gf_any |= v23p[v24 * 16 + l] != 0.0f; v23z[v24] |= gf_any;
          }
        }
      }
    }
    long gf_rows = 0;                                // the rows that are not all zero
    for (long k = 0; k < 2048; k++) { v23k[gf_rows] = k; gf_rows += v23z[k]; }

Where every lane reads and the lanes' addresses are evenly spaced (an image row: the
usual case away from the borders), the innermost loop copies `gf_src[l * gf_step]` from
the first lane's address instead (`_dense`), without index arithmetic or tests.

Where a row holds several blocks (`subs`), each block runs the above for its part of the
row, and the parts of the blocks that left a kernel column out are zeroed where another
block of the row read it. A row whose packed factor is 0 in every lane adds
`acc + 0 * w`, nothing for a finite w (padding, the holes of a strided transposed
convolution), so the sums skip it; every sum still adds its terms in the order of k.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from gradfuse.backend.c.lanes import LaneRenderer, lane_count
from gradfuse.backend.c.nest import constant
from gradfuse.backend.c.pack import Plan, guards, varies, vectorizable
from gradfuse.backend.c.vector import render_sums, rows
from gradfuse.backend.cstyle import Renderer, ctype

if TYPE_CHECKING:
    from gradfuse.backend.c.loops import Segment


def _innermost(p: Plan, varying: set[SSAValue]) -> int:
    """The loop of the nest to run innermost in the pack: the one on which the fewest ops
    that vary between lanes depend (those outside it run once per lane)."""
    best, fewest = 0, None
    for t in range(len(p.nest.sizes)):
        dep = {v for v in p.nest.forms if p.nest.depends(v, t)} | {p.nest.iv}
        count = 0
        for op in p.pack:
            if any(v in dep for v in op.operands):
                dep.update(op.results)
                count += varies(op, varying)
        larger = fewest is not None and p.nest.sizes[t] > p.nest.sizes[best]
        if fewest is None or count < fewest or (count == fewest and larger):
            best, fewest = t, count
    return best


def render_pack(r: Renderer, p: Plan, varying: set[SSAValue]) -> None:
    """Emits the pack of one block of lanes at depth 2 (see the module docstring)."""
    inner = _innermost(p, varying)
    k = p.nest.name(r)
    dep = {v for v in p.nest.forms if p.nest.depends(v, inner)} | {p.nest.iv}
    outside, inside = [], []
    for op in p.pack:
        if any(v in dep for v in op.operands):
            dep.update(op.results)
            inside.append(op)
        else:
            outside.append(op)
    lane = LaneRenderer(r, varying, keep=set(p.packed))
    depth = 2
    for t in [t for t in range(len(p.nest.sizes)) if t != inner]:
        r.emit(f"for (long {k}_{t} = 0; {k}_{t} < {p.nest.sizes[t]}; {k}_{t}++) {{", depth)
        depth += 1
    top, column = depth, "l"
    if p.subs > 1:  # a block reads a kernel row or none: zeros where another block reads it
        r.emit(f"int gf_dead[{p.subs}], gf_read = 0;", depth)
        r.emit(f"for (long gf_sub = 0; gf_sub < {p.subs}; gf_sub++) {{", depth)
        r.emit(f"const long i{p.sub} = {p.sub_index('gf_sub')};", depth + 1)
        depth, column = depth + 1, f"gf_sub * {p.lanes} + l"
    slot = f"[{k} * {p.row} + {column}]"
    size, line = p.nest.sizes[inner], f"long {k} = {p.nest.expr(k, 1, p.nest.count)};"
    lane.block([op for op in outside if not varies(op, varying)], depth, [])
    tests = [g for g in guards(p.packed[0], varying) if g not in dep] if p.sparse else []
    r.emit(f"int gf_live = {' & '.join(r.name(g) for g in tests) or 1};", depth)
    r.emit("if (gf_live) {", depth)  # else no lane reads inside: the rows stay zero
    lane.block([op for op in outside if varies(op, varying)], depth + 1, [])
    live = _live(r, p, outside)
    if live:  # the lanes' tests, once per lane
        r.emit("gf_live = 0;", depth + 1)
        r.emit(f"for (long l = 0; l < n; l++) gf_live |= {live};", depth + 1)
    dense = _dense(r, p, varying, outside, live, depth + 1)
    r.emit("if (gf_live) {", depth + 1)
    r.emit(f"for (long {k}_{inner} = 0; {k}_{inner} < {size}; {k}_{inner}++) {{", depth + 2)
    r.emit(line, depth + 3)
    assigns = [(p.buffer(v) + slot, v) for v in p.packed]
    if dense:  # the lanes read memory evenly spaced: no index arithmetic, no tests
        lane.block([op for op in inside if not varies(op, varying)], depth + 3, [])
        r.emit("if (gf_dense) {", depth + 3)
        r.emit(f"const float* gf_src = &{dense};", depth + 4)
        buf = p.buffer(p.packed[0])
        r.emit(
            f"if (gf_step == 1) for (long l = 0; l < n; l++) {buf}{slot} = gf_src[l];", depth + 4
        )
        r.emit(f"else for (long l = 0; l < n; l++) {buf}{slot} = gf_src[l * gf_step];", depth + 4)
        r.emit("} else {", depth + 3)
        lane.block([op for op in inside if varies(op, varying)], depth + 4, assigns)
        r.emit("}", depth + 3)
    else:
        lane.block(inside, depth + 3, assigns)
    if p.sparse:
        buf = p.buffer(p.packed[0])
        r.emit("int gf_any = 0;", depth + 3)
        r.emit(f"for (long l = 0; l < n; l++) gf_any |= {buf}{slot} != 0.0f;", depth + 3)
        r.emit(f"{buf[:-1]}z[{k}] |= gf_any;", depth + 3)
    r.emit("}", depth + 2)
    r.emit("}", depth + 1)
    r.emit("}", depth)
    if p.subs > 1:
        r.emit("gf_dead[gf_sub] = !gf_live;", depth)
        r.emit("gf_read |= gf_live;", depth)
        r.emit("}", top)
        r.emit(f"for (long gf_sub = 0; gf_sub < {p.subs} && gf_read; gf_sub++) {{", top)
        r.emit("if (!gf_dead[gf_sub]) continue;", top + 1)
        r.emit(f"for (long {k}_{inner} = 0; {k}_{inner} < {size}; {k}_{inner}++) {{", top + 1)
        r.emit(line, top + 2)
        r.emit(f"for (long l = 0; l < n; l++) {p.buffer(p.packed[0])}{slot} = 0.0f;", top + 2)
        r.emit("}", top + 1)
        r.emit("}", top)
    for depth in reversed(range(2, top)):
        r.emit("}", depth)
    if p.sparse:
        base = p.buffer(p.packed[0])[:-1]
        r.emit("long gf_rows = 0;", 2)
        r.emit(f"for (long k = 0; k < {p.nest.count}; k++) {{", 2)
        r.emit(f"{base}k[gf_rows] = k;", 3)
        r.emit(f"gf_rows += {base}z[k];", 3)
        r.emit("}", 2)


def _dense(
    r: Renderer, p: Plan, varying: set[SSAValue], outside: list[Operation], live: str, depth: int
) -> str:
    """Where the packed value is one read, guarded by the lanes' test `live` or not, whose
    indices that differ between lanes are known outside the innermost loop: emits the
    test that every lane reads (`gf_dense`) and that the lanes' addresses are evenly
    spaced (`gf_base + gf_step * l`), and returns the first lane's read for the innermost
    loop (C), else ''."""
    if not p.sparse:
        return ""
    v, test = p.packed[0], None
    op = v.owner
    if isinstance(op, arith.SelectOp):
        if not live or r.names.get(op.cond) != live:
            return ""
        test, op = op.cond, op.lhs.owner
    if not isinstance(op, memref.LoadOp) or op in outside:
        return ""
    ty = op.memref.type
    assert isinstance(ty, MemRefType)
    shape = ty.get_shape()
    lanes, same = [], []  # terms of the flat index
    for q, x in enumerate(op.indices):
        times = f" * {prod(shape[q + 1 :])}" if prod(shape[q + 1 :]) != 1 else ""
        name = r.names.get(x, "")
        picked = x.owner
        if x not in varying:
            same.append(r.name(x) + times)
        elif x is p.index or (name.endswith("[l]") and picked in outside):
            lanes.append(name + times)
        elif (
            isinstance(picked, arith.SelectOp)
            and picked.cond is test
            and picked.lhs not in varying
            and constant(picked.rhs) == 0
        ):
            same.append(r.name(picked.lhs) + times)  # what the lane reads where it reads
        else:
            return ""
    each = f"{r.names[test]} & " if test is not None else ""
    r.emit("long gf_base = 0, gf_step = 0;", depth)
    r.emit("int gf_dense = 1;", depth)
    r.emit("for (long l = 0; l < n; l++) {", depth)
    r.emit(f"long gf_at = {' + '.join(lanes) or '0'};", depth + 1)
    r.emit("if (l == 0) gf_base = gf_at;", depth + 1)
    r.emit("if (l == 1) gf_step = gf_at - gf_base;", depth + 1)
    r.emit(f"gf_dense &= {each}(gf_at == gf_base + gf_step * l);", depth + 1)
    r.emit("}", depth)
    return f"{r.name(op.memref)}[gf_base + {' + '.join(same) or '0'}]"


def _live(r: Renderer, p: Plan, outside: list[Operation]) -> str:
    """The lane array of the whole test of `select(test, x, 0.0)` (the packed value of a
    sparse plan) where the pack computes it outside its innermost loop, else ''."""
    if not p.sparse:
        return ""
    op = p.packed[0].owner
    if not isinstance(op, arith.SelectOp) or not guards(p.packed[0], set()):
        return ""  # not a guarded read (`guards` of no varying value: every conjunct)
    test = op.cond
    if test.owner not in outside or not r.names.get(test, "").endswith("[l]"):
        return ""
    return r.names[test]


def render(r: Renderer, seg: Segment, p: Plan, varying: set[SSAValue]) -> None:
    """Emits the packed segment: buffers for each thread, the loops over the blocks, and
    in each the pack and the sums (in vector registers where `vector` can)."""
    count = seg.dims[p.lane]
    p.names = {v: r.name(v) for v in p.packed}
    for v in p.packed:
        t, buf = ctype(v.type), p.buffer(v)
        size = p.nest.count * p.row
        r.emit(f"char* {buf}m = (char*)__builtin_calloc({size} * sizeof({t}) + 64, 1);", 1)
        r.emit(f"{t}* {buf} = ({t}*)(((unsigned long){buf}m + 63) & ~63UL);", 1)
    if p.sparse:
        base = p.buffer(p.packed[0])[:-1]
        r.emit(f"unsigned char* {base}z = (unsigned char*)__builtin_malloc({p.nest.count});", 1)
        r.emit(f"long* {base}k = (long*)__builtin_malloc({p.nest.count} * sizeof(long));", 1)
    vector = vectorizable(p, varying)
    outer = [d for d in range(len(seg.dims)) if d not in (p.j, p.lane)]
    strided = p.subs > 1 and p.step > 1
    loops = len(outer) + 1 + strided + (p.lane_step > 1)
    r.work_shared(f"collapse({loops}) nowait", 1)
    for d in outer:
        if d != p.sub or p.subs == 1:
            r.emit(f"for (long i{d} = 0; i{d} < {seg.dims[d]}; i{d}++)", 1)
        elif not strided:
            r.emit(f"for (long i{d}b = 0; i{d}b < {seg.dims[d]}; i{d}b += {p.subs})", 1)
        else:  # blocks of indices `step` apart: step blocks in each span of subs * step
            r.emit(f"for (long i{d}g = 0; i{d}g < {seg.dims[d] // (p.subs * p.step)}; i{d}g++)", 1)
            r.emit(f"for (long i{d}r = 0; i{d}r < {p.step}; i{d}r++)", 1)
    step = p.lane_step
    if step > 1:  # lanes `step` apart: residues innermost
        r.emit(f"for (long gf_b = 0; gf_b < {count // step}; gf_b += {p.lanes})", 1)
        r.emit(f"for (long b = 0; b < {step}; b++) {{", 1)
        r.emit(f"const long n = {lane_count(count // step, p.lanes).replace('b', 'gf_b')};", 2)
    else:
        r.emit(f"for (long b = 0; b < {count}; b += {p.lanes}) {{", 1)
        r.emit(f"const long n = {lane_count(count, p.lanes)};", 2)
    if strided:
        r.emit(f"const long i{p.sub}b = i{p.sub}g * {p.subs * p.step} + i{p.sub}r;", 2)
    lane = "(b + l)" if step == 1 else f"(b + {step} * (gf_b + l))"
    r.names[p.index] = lane  # type: ignore[index]
    LaneRenderer(r, varying).block(p.before, 2, [])
    if p.sparse:
        r.emit(f"__builtin_memset({base}z, 0, {p.nest.count});", 2)
    render_pack(r, p, varying)
    if vector:
        render_sums(r, seg, p, varying)
    else:
        _sums(r, seg, p, varying)
    r.emit("}", 1)
    for v in p.packed:
        r.emit(f"__builtin_free({p.buffer(v)}m);", 1)
    if p.sparse:
        r.emit(f"__builtin_free({base}z);", 1)
        r.emit(f"__builtin_free({base}k);", 1)


def _sums(r: Renderer, seg: Segment, p: Plan, varying: set[SSAValue]) -> None:
    """The loop over dim j with the sums in lane arrays, for bodies `vector` cannot take."""
    assert p.j is not None and p.subs == 1
    r.emit(f"for (long i{p.j} = 0; i{p.j} < {seg.dims[p.j]}; i{p.j}++) {{", 2)
    lane = LaneRenderer(r, varying)
    lane.block(p.inner, 3, [])
    k = r.name(p.nest.iv)
    for v in p.packed:
        r.names[v] = f"{p.buffer(v)}[{k} * {p.row} + l]"
    lane.loop(p.loop, 3, p.compute, lambda d: rows(r, p, d))
    lane.block(p.after, 3, [])
    r.emit("}", 2)
