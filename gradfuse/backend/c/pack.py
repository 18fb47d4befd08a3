"""Packed lane blocks: the lane-varying part of a reduction computed once for a whole
outer dimension of the kernel that it does not depend on (the analysis; `pack_render`
emits the C).

A convolution rendered a block of output pixels at a time (see `lanes`),
`y[n, co, oh, ow] = sum_k x(n, k, oh, ow) * w[k, co]`, reads its input through a guarded
im2col map (bounds tests, selects, a gather) that does not depend on the output channel
co, yet ran again for every co. Packing computes those values once per block of lanes,
one row of lanes per k of the reduction, and then loops over co reading the rows: the
reduction becomes a dense multiply-add over contiguous lanes (`vector`).

`plan` splits the segment around its reduction loop: the body ops that depend on the
shared dim j (co) or on the sums run for each index of j (`compute`); the values that vary
between lanes and that those ops read, but that do not depend on j, are packed (`packed`),
with the ops that compute them (`pack`). Where the lanes cover fewer than LANES points
(an 8x8 or 4x4 image), or the sums read a weight too large to stay near the core, a row
also holds the blocks of `subs` indices of another dim (`sub`), `step` apart, so that a
row fills a vector register and each read of the weight serves more points. Where the
pack tests an index `mod m` (a transposed convolution with stride m), the lanes of a
block (`lane_step`) and its blocks are m apart, so that each kernel row and column serves
all of them or none. Without a dim j to share, a guarded convolution is still packed (j
None): the pack leaves out what no lane reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import AnyFloat, Float32Type, FloatAttr, MemRefType
from xdsl.ir import Attribute, Operation, SSAValue

from gradfuse.backend.c.lanes import LANES, lane_values
from gradfuse.backend.c.nest import Nest, constant, nest
from gradfuse.backend.cstyle import ctype

if TYPE_CHECKING:
    from gradfuse.backend.c.loops import Segment

PACK_BYTES = 1 << 24  # the largest pack buffer of one thread
ROW = 64  # values in a row of the pack, at most (four vectors)
BLOCKED = 16  # indices of dim j from which a cheap pack pays (sums in register blocks)
SHARED = 1 << 18  # bytes that the sums read (a weight) beyond which wider rows pay
CHEAP = (arith.MulfOp, arith.AddfOp, arith.SubfOp, arith.NegfOp)
VECTOR = {arith.AddfOp: "+", arith.SubfOp: "-", arith.MulfOp: "*", arith.DivfOp: "/"}


@dataclass
class Plan:
    """How a lane segment splits around its reduction loop for packing along dim `j`."""

    j: int | None  # the dim whose indices share the pack (None: no dim)
    loop: scf.ForOp
    nest: Nest
    before: list[Operation]  # before the loop, not depending on dim j: once per block
    inner: list[Operation]  # before the loop, depending on dim j
    pack: list[Operation]  # loop body ops that compute the packed values
    compute: list[Operation]  # loop body ops that run for every index of dim j
    packed: list[SSAValue]
    after: list[Operation]
    sparse: bool = False  # the sums skip rows of zeros (one f32 factor of each product)
    lanes: int = LANES  # points of the last dim in a block
    lane_step: int = 1  # the points of a block are this far apart (then `b` is the residue)
    sub: int | None = None  # the dim whose `subs` indices `step` apart share a row
    subs: int = 1
    step: int = 1
    names: dict[SSAValue, str] = field(default_factory=dict)  # of the packed values
    lane: int = -1  # the dim of the lanes
    index: SSAValue | None = None  # its index, the value that differs between lanes

    @property
    def row(self) -> int:
        """Values in a row of the pack: `subs` blocks of lanes, padded to whole vectors."""
        used = self.lanes * self.subs
        return -(-used // LANES) * LANES if used > self.lanes else self.lanes

    def sub_index(self, v: str) -> str:
        """The index of dim `sub` in the row's block `v` (C)."""
        return f"i{self.sub}b + {v}" if self.step == 1 else f"i{self.sub}b + ({v}) * {self.step}"

    def buffer(self, v: SSAValue) -> str:
        """The name of the pack buffer of `v` (`v95p`; `v95z`, `v95k`: its rows)."""
        return f"{self.names[v]}p"


def width(count: int) -> int:
    """The lanes of a block over a dim of `count` points: 4, 8 or LANES."""
    return 4 if count <= 4 else 8 if count <= 8 else LANES


def dependent(seg: Segment, loop: scf.ForOp, dim: int | None, carried: bool) -> set[SSAValue]:
    """The values of `seg` that depend on the index of loop dim `dim` (and, with
    `carried`, on the values that `loop` carries)."""
    dep: set[SSAValue] = set()
    if dim is not None:
        word = re.compile(rf"\bi{dim}\b")
        dep = {v for v, name in seg.names.items() if word.search(name)} | {seg.lid}
    if carried:
        dep |= {*loop.body.block.args[1:], *loop.results}
    for op in seg.block.walk():
        if op not in seg.skip and any(v in dep for v in op.operands):
            dep.update(op.results)
    return dep


def varies(op: Operation, varying: set[SSAValue]) -> bool:
    """Whether `op` computes a value that differs between lanes."""
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
        if not varies(op, varying):
            continue
        if type(op) not in VECTOR and not isinstance(op, arith.NegfOp):
            return False
        if not isinstance(op.results[0].type, Float32Type):
            return False
        if any(v in varying and v not in vectors for v in op.operands):
            return False
        vectors.update(op.results)
    return True


def _ordered(
    ops: set[Operation], order: list[Operation], varying: set[SSAValue]
) -> list[Operation]:
    """`ops` in the order of `order`, the ops that vary between lanes last (one lane loop)."""
    chosen = [op for op in order if op in ops]
    return [op for op in chosen if not varies(op, varying)] + [
        op for op in chosen if varies(op, varying)
    ]


def _dear(ops: set[Operation], varying: set[SSAValue], last: SSAValue | None) -> bool:
    """Whether `ops` do dear work for each lane (what packing saves): index arithmetic,
    tests, or reads other than contiguous along the lanes; float arithmetic is cheap."""
    for op in ops:
        if not varies(op, varying):
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


def guards(v: SSAValue, varying: set[SSAValue]) -> list[SSAValue]:
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


def _split(
    seg: Segment,
    ops: list[Operation],
    loop: scf.ForOp,
    k: Nest,
    j: int | None,
    varying: set[SSAValue],
    lane: int,
) -> Plan | None:
    dep = dependent(seg, loop, j, carried=True)
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
            elif j is None and isinstance(owner, CHEAP):
                work.append(owner)  # nothing to share: a product's factors stay apart
            elif v not in packed:
                packed.append(v)
    pack: set[Operation] = set()
    work = [v.owner for v in packed if isinstance(v.owner, Operation)]
    while work:
        op = work.pop()
        if op not in pack:
            pack.add(op)
            work += [v.owner for v in op.operands if v.owner in mine]  # type: ignore[misc]
    index = _index(seg, lane)
    if not packed or _dear(compute, varying, index):
        return None  # dear work left for every index of dim j
    if not _dear(pack, varying, index) and (j is None or seg.dims[j] < BLOCKED):
        return None  # nothing dear to share, nor enough indices of j to block the sums
    lanes = width(seg.dims[lane])
    if k.count * LANES * sum(8 if ctype(v.type) == "long" else 4 for v in packed) > PACK_BYTES:
        return None
    pos = ops.index(loop)
    p = Plan(
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
        lanes,
        lane=lane,
        index=index,
    )
    if j is None and not (p.sparse and len(k.sizes) > 1 and guards(packed[0], varying)):
        return None  # without sharing, packing pays where it leaves out what no lane reads
    return p


def _stride(pack: list[Operation], dep: set[SSAValue]) -> int:
    """The modulus m of a test `x mod m == 0` in the pack on a value of `dep` (the holes of
    a transposed convolution with stride m), else 1: indices m apart read the same rows."""
    for op in pack:
        if isinstance(op, arith.RemSIOp | arith.RemUIOp) and op.lhs in dep:
            m = constant(op.rhs)
            if m is not None and m > 1 and _tested(op.result, 3):
                return m
    return 1


def _tested(v: SSAValue, depth: int) -> bool:
    """Whether `v` (or its fix-up for a negative remainder: add, select) is compared to 0."""
    for use in v.uses:
        op = use.operation
        if isinstance(op, arith.CmpiOp) and op.predicate.value.data == 0:  # eq
            if any(constant(w) == 0 for w in op.operands):
                return True
        elif isinstance(op, arith.SelectOp | arith.AddiOp) and depth > 0:
            if _tested(op.results[0], depth - 1):
                return True
    return False


def _subs(seg: Segment, p: Plan, varying: set[SSAValue]) -> None:
    """Gives the rows of the pack the blocks of several indices of the nearest outer dim
    (not j) on which neither the scalars of the sums nor the ops before the loop depend:
    so that a narrow block still fills a vector, and, where the sums read more than fits
    near the core (a large weight), so that each read serves more points."""
    if not vectorizable(p, varying):
        return
    dims = [d for d in range(len(seg.dims)) if d not in (p.j, p.lane) and seg.dims[d] > 1]
    if not dims:
        return
    s = dims[-1]
    dep = dependent(seg, p.loop, s, carried=False)
    scalars = [op for op in p.compute if not varies(op, varying)]  # the rest reads the rows
    if any(r in dep for op in [*p.before, *scalars] for r in op.results):
        return
    reads = sum(_bytes(op.memref.type) for op in scalars if isinstance(op, memref.LoadOp))
    most = ROW if reads > SHARED else LANES
    step = _stride(p.pack, dep) if p.sparse else 1
    for st in dict.fromkeys((step, 1)):
        for subs in range(most // p.lanes, 1, -1):
            if seg.dims[s] % (subs * st) == 0:
                p.sub, p.subs, p.step = s, subs, st
                return


def _lane_step(seg: Segment, p: Plan, varying: set[SSAValue]) -> None:
    """Blocks of lanes `m` points apart where the pack tests a lane's index `mod m` (the
    holes of a transposed convolution with stride m): then each kernel column reads
    every lane of a block or none, and the sums skip the rows that none reads."""
    step = _stride(p.pack, varying) if p.sparse else 1
    count = seg.dims[p.lane]
    if step > 1 and count % step == 0:
        p.lane_step, p.lanes = step, width(count // step)


def _bytes(ty: Attribute) -> int:
    assert isinstance(ty, MemRefType)
    wide = ctype(ty.element_type) in ("double", "long", "int64_t")
    return prod(ty.get_shape()) * (8 if wide else 4)


def plan(seg: Segment, ops: list[Operation], varying: set[SSAValue], lane: int) -> Plan | None:
    """The packing of a lane segment with one reduction loop (`ops` its top-level ops) and
    lanes along dim `lane`, sharing the largest other dim that leaves work to share; None
    where there is none."""
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
    if k is None or k.count < 2:
        return None  # (a reduction of one step has nothing to pack)
    best: Plan | None = None
    for j in range(len(seg.dims)):
        if (
            j == lane
            or seg.dims[j] < 2
            or (best is not None and seg.dims[j] <= seg.dims[best.j or 0])
        ):
            continue
        best = _split(seg, ops, loop, k, j, varying, lane) or best
    if best is None:
        best = _split(seg, ops, loop, k, None, varying, lane)
        if best is not None and not vectorizable(best, varying):
            return None
    if best is not None:
        _lane_step(seg, best, varying)
        _subs(seg, best, varying)
    return best


def _index(seg: Segment, dim: int) -> SSAValue | None:
    """The index of loop dim `dim` (what the loops name `i{dim}`)."""
    if dim == len(seg.dims) - 1:
        return seg.last
    return next((v for v, name in seg.names.items() if name == f"i{dim}"), None)


TESTS = (arith.CmpiOp, arith.SelectOp, arith.AndIOp, arith.RemSIOp, arith.FloorDivSIOp)


def _scattered(p: Plan, varying: set[SSAValue]) -> bool:
    """Whether a store after the sums writes the lanes other than side by side (a
    transposed result: each lane's value to its own cache line)."""
    for op in p.after:
        if isinstance(op, memref.StoreOp):
            *rest, last = op.indices or [None]
            if last is not p.index or any(i in varying for i in rest):
                return True
    return False


def choose(seg: Segment, ops: list[Operation]) -> tuple[Plan, set[SSAValue]] | None:
    """The packing of a lane segment and the values that differ between its lanes, for
    the lanes along the innermost dim whose sums leave no tests to the scalars of each
    index of dim j (a weight gradient tests its input's bounds for each output channel:
    its lanes go along the kernel's taps instead), else along the dim that leaves fewest;
    among those, lanes that the result is stored side by side along (a gradient stored
    transposed, `dW[k, j] = sum_i h[i, k] * dy[i, j]` over a domain [j, k]: lanes along j
    read dy's rows and write dW's in whole vectors; along k, each lane a row of its own)."""
    best: tuple[tuple[int, bool], Plan, set[SSAValue]] | None = None
    for lane in reversed(range(len(seg.dims))):
        index = _index(seg, lane)
        if index is None or seg.dims[lane] < 2 and lane != len(seg.dims) - 1:
            continue
        word = re.compile(rf"\bi{lane}\b")
        named = {v for v, name in seg.names.items() if word.search(name) and v is not index}
        if any(v in named for op in seg.block.walk() if op not in seg.skip for v in op.operands):
            continue  # a linear index over this dim is read: lanes cannot take it apart
        varying = lane_values(seg.block, index)
        if varying is None:
            return None
        p = plan(seg, ops, varying, lane)
        if p is None:
            continue
        tests = sum(isinstance(op, TESTS) and not varies(op, varying) for op in p.compute)
        score = (tests, _scattered(p, varying))
        if best is None or score < best[0]:
            best = (score, p, varying)
        if score == (0, False):
            break
    return (best[1], best[2]) if best is not None else None
