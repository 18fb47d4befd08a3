"""Packed lane blocks: the lane-varying part of a reduction computed once for a whole
outer dimension of the kernel that it does not depend on.

A convolution rendered a block of output pixels at a time (see `lanes`),
`y[n, co, oh, ow] = sum_k x(n, k, oh, ow) * w[k, co]`, reads its input through a guarded
im2col map (bounds tests, selects, a gather) that does not depend on the output channel
co, yet ran again for every co. Here each block of lanes first packs those values, one
row of lanes per k of the reduction, into a buffer, and then loops over co reading it, so
that the reduction becomes a dense multiply-add over contiguous lanes (`vector`). The
reduction index is split into the loops of its `k / C`, `k % C` reads (see `nest`), and
the pack runs them in the order that leaves least to compute for each lane innermost
(the channel: the bounds tests hang on the kernel row and column only):

    for (long v25_1 = 0; v25_1 < 4; v25_1++)
    for (long v25_2 = 0; v25_2 < 4; v25_2++) {
      ...
      if (v31 & v37) {                               // else no lane reads inside the image
        long v74[16]; for (long l = 0; l < n; l++) { ... v74[l] = ...; }  // once per lane
        for (long v25_0 = 0; v25_0 < 128; v25_0++) {
          long v25 = ((v25_0) * 4 + v25_1) * 4 + v25_2;
          for (long l = 0; l < n; l++) { ...; v95p[v25 * 16 + l] = v95; }
          int gf_any = 0; for (...) gf_any |= v95p[v25 * 16 + l] != 0.0f; v95z[v25] = gf_any;
        }
      }
    }
    long gf_rows = 0;                                // the rows that are not all zero
    for (long k = 0; k < 2048; k++) { v95k[gf_rows] = k; gf_rows += v95z[k]; }

A row whose packed factor is 0 in every lane adds `acc + 0 * w`, nothing for a finite w
(padding, the holes of a strided transposed convolution), so the sums skip it; every sum
still adds its terms in the order of k.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import AnyFloat, Float32Type, FloatAttr
from xdsl.ir import Operation, SSAValue

from gradfuse.backend.c.lanes import LANES, LaneRenderer, lane_count
from gradfuse.backend.c.nest import Nest, nest
from gradfuse.backend.cstyle import Renderer, ctype

if TYPE_CHECKING:
    from gradfuse.backend.c.loops import Segment

PACK_BYTES = 1 << 24  # the largest pack buffer of one thread


@dataclass
class Plan:
    """How a lane segment splits around its reduction loop for packing along dim `j`."""

    j: int
    loop: scf.ForOp
    nest: Nest
    before: list[Operation]  # before the loop, not depending on dim j: once per block
    inner: list[Operation]  # before the loop, depending on dim j
    pack: list[Operation]  # loop body ops that compute the packed values
    compute: list[Operation]  # loop body ops that run for every index of dim j
    packed: list[SSAValue]
    after: list[Operation]
    sparse: bool = False  # the sums skip rows of zeros (one float factor of a product)
    names: dict[SSAValue, str] = field(default_factory=dict)  # of the packed values

    def buffer(self, v: SSAValue) -> str:
        """The name of the pack buffer of `v` (`v95p`; `v95z`, `v95k`: its rows)."""
        return f"{self.names[v]}p"


def width(count: int) -> int:
    """The lanes of a block over a dim of `count` points: 4, 8 or LANES."""
    return 4 if count <= 4 else 8 if count <= 8 else LANES


def _dependent(seg: Segment, loop: scf.ForOp, j: int) -> set[SSAValue]:
    """The values of `seg` that depend on the index of loop dim `j` (or are carried)."""
    word = re.compile(rf"\bi{j}\b")
    dep = {v for v, name in seg.names.items() if word.search(name)} | {seg.lid}
    dep |= {*loop.body.block.args[1:], *loop.results}
    for op in seg.block.walk():
        if op not in seg.skip and any(v in dep for v in op.operands):
            dep.update(op.results)
    return dep


def _varies(op: Operation, varying: set[SSAValue]) -> bool:
    return any(r in varying for r in op.results)


def _ordered(
    ops: set[Operation], order: list[Operation], varying: set[SSAValue]
) -> list[Operation]:
    """`ops` in the order of `order`, the ops that vary between lanes last (one lane loop)."""
    chosen = [op for op in order if op in ops]
    return [op for op in chosen if not _varies(op, varying)] + [
        op for op in chosen if _varies(op, varying)
    ]


def _dear(ops: set[Operation], varying: set[SSAValue], last: SSAValue | None) -> bool:
    """Whether `ops` do dear work for each lane (what packing saves): index arithmetic,
    tests, or reads other than contiguous along the lanes; float arithmetic is cheap."""
    for op in ops:
        if not _varies(op, varying):
            continue
        if isinstance(op, memref.LoadOp):
            contiguous = op.indices and op.indices[-1] is last
            if not contiguous or any(i in varying for i in op.indices[:-1]):
                return True
        elif not all(isinstance(r.type, AnyFloat) for r in op.results):
            return True
    return False


def _sparse(loop: scf.ForOp, packed: list[SSAValue]) -> bool:
    """Whether each carried value only adds products with the one packed f32 factor."""
    y = loop.body.block.last_op
    if len(packed) != 1 or not isinstance(packed[0].type, Float32Type) or y is None:
        return False
    for arg, v in zip(loop.body.block.args[1:], y.operands):
        add = v.owner
        if not isinstance(add, arith.AddfOp) or arg not in add.operands:
            return False
        term = add.rhs if add.lhs is arg else add.lhs
        mul = term.owner
        if not isinstance(mul, arith.MulfOp) or packed[0] not in mul.operands:
            return False
    return True


def _split(
    seg: Segment, ops: list[Operation], loop: scf.ForOp, k: Nest, j: int, varying: set[SSAValue]
) -> Plan | None:
    dep = _dependent(seg, loop, j)
    block = loop.body.block
    body = [op for op in block.ops if not isinstance(op, scf.YieldOp) and op not in k.ops]
    mine = set(body)
    compute: set[Operation] = set()
    packed: list[SSAValue] = []
    work = [op for op in body if any(r in dep for r in op.results)]
    while work:
        op = work.pop()
        if op in compute:
            continue
        compute.add(op)
        for v in op.operands:
            owner = v.owner
            if not isinstance(owner, Operation) or owner not in mine:
                continue
            if v in dep or v not in varying:
                work.append(owner)  # computed again for each index of dim j (scalars: cheap)
            elif v not in packed:
                packed.append(v)
    pack: set[Operation] = set()
    work = [v.owner for v in packed if isinstance(v.owner, Operation)]
    while work:
        op = work.pop()
        if op not in pack:
            pack.add(op)
            work += [v.owner for v in op.operands if v.owner in mine]  # type: ignore[misc]
    if not packed or not _dear(pack, varying, seg.last) or _dear(compute, varying, seg.last):
        return None  # nothing dear to share, or dear work left for every index of dim j
    lanes = width(seg.dims[-1])
    if k.count * lanes * sum(8 if ctype(v.type) == "long" else 4 for v in packed) > PACK_BYTES:
        return None
    pos = ops.index(loop)
    return Plan(
        j,
        loop,
        k,
        [op for op in ops[:pos] if not any(r in dep for r in op.results)],
        [op for op in ops[:pos] if any(r in dep for r in op.results)],
        _ordered(pack, body, varying),
        _ordered(compute, body, varying),
        packed,
        ops[pos + 1 :],
        _sparse(loop, packed),
    )


def plan(seg: Segment, ops: list[Operation], varying: set[SSAValue]) -> Plan | None:
    """The packing of a lane segment with one reduction loop (`ops` its top-level ops),
    along the largest outer dim that leaves work to share; None where there is none."""
    loops = [op for op in ops if isinstance(op, scf.ForOp)]
    if len(loops) != 1 or any(op.regions for op in ops if op is not loops[0]):
        return None
    loop = loops[0]
    if not loop.results or not all(r in varying for r in loop.results):
        return None
    last = loop.body.block.last_op
    if any(op.regions or not op.results for op in loop.body.block.ops if op is not last):
        return None
    pos = ops.index(loop)
    if any(not op.results for op in ops[:pos]):
        return None
    k = nest(loop)
    if k is None:
        return None
    best: Plan | None = None
    for j in range(len(seg.dims) - 1):
        if seg.dims[j] < 2 or (best is not None and seg.dims[j] <= seg.dims[best.j]):
            continue
        best = _split(seg, ops, loop, k, j, varying) or best
    return best


def _guards(v: SSAValue, varying: set[SSAValue]) -> list[SSAValue]:
    """The conjuncts of `select(c0 & c1 & ..., x, 0.0)` that are the same in every lane."""
    op = v.owner
    if not isinstance(op, arith.SelectOp):
        return []
    zero = op.rhs.owner
    if not isinstance(zero, arith.ConstantOp) or not isinstance(zero.value, FloatAttr):
        return []
    if zero.value.value.data != 0.0:
        return []
    leaves, work = [], [op.cond]
    while work:
        c = work.pop()
        if isinstance(c.owner, arith.AndIOp):
            work += c.owner.operands
        elif c not in varying:
            leaves.append(c)
    return leaves


def _innermost(p: Plan, varying: set[SSAValue]) -> int:
    """The loop of the nest to run innermost in the pack: the one on which the fewest ops
    that vary between lanes depend (those outside it run once per lane)."""
    if len(p.nest.sizes) == 1:
        return 0
    best, fewest = 0, None
    for t in range(len(p.nest.sizes)):
        dep = {v for v in p.nest.forms if p.nest.depends(v, t)} | {p.nest.iv}
        count = 0
        for op in p.pack:
            if any(v in dep for v in op.operands):
                dep.update(op.results)
                count += _varies(op, varying)
        if (
            fewest is None
            or count < fewest
            or (count == fewest and p.nest.sizes[t] > p.nest.sizes[best])
        ):
            best, fewest = t, count
    return best


def render_pack(r: Renderer, p: Plan, varying: set[SSAValue], lanes: int) -> None:
    """Emits the pack of one block of lanes at depth 2 (see the module docstring)."""
    inner = _innermost(p, varying)
    order = [t for t in range(len(p.nest.sizes)) if t != inner] + [inner]
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
    for t in order[:-1]:
        r.emit(f"for (long {k}_{t} = 0; {k}_{t} < {p.nest.sizes[t]}; {k}_{t}++) {{", depth)
        depth += 1
    lane.block([op for op in outside if not _varies(op, varying)], depth, [])
    guards = [g for g in _guards(p.packed[0], varying) if g not in dep] if p.sparse else []
    if guards:  # else no lane reads inside: the rows stay all zero
        r.emit(f"if ({' & '.join(r.name(g) for g in guards)}) {{", depth)
        depth += 1
    lane.block([op for op in outside if _varies(op, varying)], depth, [])
    size = p.nest.sizes[inner]
    r.emit(f"for (long {k}_{inner} = 0; {k}_{inner} < {size}; {k}_{inner}++) {{", depth)
    r.emit(f"long {k} = {p.nest.expr(k, 1, p.nest.count)};", depth + 1)
    slot = f"[{k} * {lanes} + l]"
    lane.block(inside, depth + 1, [(p.buffer(v) + slot, v) for v in p.packed])
    if p.sparse:
        buf = p.buffer(p.packed[0])
        r.emit("int gf_any = 0;", depth + 1)
        r.emit(f"for (long l = 0; l < n; l++) gf_any |= {buf}{slot} != 0.0f;", depth + 1)
        r.emit(f"{buf[:-1]}z[{k}] = gf_any;", depth + 1)
    r.emit("}", depth)
    for _ in [*order[:-1], *guards[:1]]:
        depth -= 1
        r.emit("}", depth)
    if p.sparse:
        base = p.buffer(p.packed[0])[:-1]
        r.emit("long gf_rows = 0;", 2)
        r.emit(f"for (long k = 0; k < {p.nest.count}; k++) {{", 2)
        r.emit(f"{base}k[gf_rows] = k;", 3)
        r.emit(f"gf_rows += {base}z[k];", 3)
        r.emit("}", 2)


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


def render(r: Renderer, seg: Segment, p: Plan, varying: set[SSAValue]) -> None:
    """Emits the packed segment (see the module docstring)."""
    from gradfuse.backend.c.vector import render_sums, vectorizable

    count = seg.dims[-1]
    lanes = width(count)
    p.names = {v: r.name(v) for v in p.packed}
    for v in p.packed:
        t, buf = ctype(v.type), p.buffer(v)
        size = p.nest.count * lanes
        r.emit(f"char* {buf}m = (char*)__builtin_calloc({size} * sizeof({t}) + 64, 1);", 1)
        r.emit(f"{t}* {buf} = ({t}*)(((unsigned long){buf}m + 63) & ~63UL);", 1)
    if p.sparse:
        base = p.buffer(p.packed[0])[:-1]
        r.emit(f"unsigned char* {base}z = (unsigned char*)__builtin_malloc({p.nest.count});", 1)
        r.emit(f"long* {base}k = (long*)__builtin_malloc({p.nest.count} * sizeof(long));", 1)
    vector = vectorizable(p, varying)
    outer = [k for k in range(len(seg.dims) - 1) if k != p.j]
    r.emit(f"#pragma omp for collapse({len(outer) + 1}) nowait", 1)
    for k in outer:
        r.emit(f"for (long i{k} = 0; i{k} < {seg.dims[k]}; i{k}++)", 1)
    r.emit(f"for (long b = 0; b < {count}; b += {lanes}) {{", 1)
    r.emit(f"const long n = {lane_count(count, lanes)};", 2)
    if vector:
        vec = f"vector_size({4 * lanes}), aligned(4), may_alias"
        r.emit(f"typedef float gf_v __attribute__(({vec}));", 2)
    r.names[seg.last] = "(b + l)"  # type: ignore[index]
    LaneRenderer(r, varying).block(p.before, 2, [])
    if p.sparse:
        base = p.buffer(p.packed[0])[:-1]
        r.emit(f"__builtin_memset({base}z, 0, {p.nest.count});", 2)
    render_pack(r, p, varying, lanes)
    if vector:
        render_sums(r, seg, p, varying, lanes)
    else:
        _sums(r, seg, p, varying, lanes)
    r.emit("}", 1)
    for v in p.packed:
        r.emit(f"__builtin_free({p.buffer(v)}m);", 1)
    if p.sparse:
        base = p.buffer(p.packed[0])[:-1]
        r.emit(f"__builtin_free({base}z);", 1)
        r.emit(f"__builtin_free({base}k);", 1)


def _sums(r: Renderer, seg: Segment, p: Plan, varying: set[SSAValue], lanes: int) -> None:
    """The loop over dim j with the sums in lane arrays, for bodies `vector` cannot take."""
    r.emit(f"for (long i{p.j} = 0; i{p.j} < {seg.dims[p.j]}; i{p.j}++) {{", 2)
    lane = LaneRenderer(r, varying)
    lane.block(p.inner, 3, [])
    k = r.name(p.nest.iv)
    for v in p.packed:
        r.names[v] = f"{p.buffer(v)}[{k} * {lanes} + l]"
    lane.loop(p.loop, 3, p.compute, lambda d: rows(r, p, d))
    lane.block(p.after, 3, [])
    r.emit("}", 2)
