"""Kernels for the CPU: the GPU thread grid of a lowered kernel becomes loop nests.

A lowered `gpu.func` computes one point per thread: `gid = bid * block + tid`, an
`scf.if gid < end` per fused kernel (a chain of them for a horizontal group), and
inside, the point's indices as `remui`/`divui` of the local id. On a CPU the same
body is better as one loop nest per kernel of the chain, over the kernel's own
domain: no bounds checks, no divisions, the last dimension innermost and contiguous,
where gcc vectorises. The nest is parallel (OpenMP) when the kernel's work is large,
and each loop gets a `simd` pragma: the innermost reduction loop when it reads
memory contiguously (a dot product), else the innermost parallel loop (a column sum,
an elementwise kernel), so that register blocking across output points is gcc's:

    static void k0(float* __restrict__ v0, ..., long grid, long block) {
      long v5 = 255;
      #pragma omp parallel if(130050 >= 1048576)
      {
      #pragma omp for collapse(1) nowait
      for (long i0 = 0; i0 < 2; i0++)
      for (long i1 = 0; i1 < 255; i1++) {
        long v14 = 0 + i0 * 255 + i1;
        #pragma omp simd reduction(+:v18)
        for (long v20 = 0; v20 < 255; v20 += 1) { ... }
      ...

Kernels whose structure is not this one are rendered thread by thread, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import arith, gpu, memref, scf
from xdsl.ir import Block, Operation, SSAValue

from gradfuse.backend.c import pack, pack_render
from gradfuse.backend.c.lanes import LANES, WIDE, LaneRenderer, lane_values
from gradfuse.backend.c.nest import constant
from gradfuse.backend.cstyle import CTarget, Renderer, ctype
from gradfuse.passes.loops.loop_ir import REDUCING, depends


@dataclass
class Segment:
    """One kernel of the chain: ids [lo, hi) running `block`; `lid` is its local id."""

    lo: int
    hi: int
    block: Block
    lid: SSAValue
    dims: list[int] = field(default_factory=list)  # loop counts, outermost first
    names: dict[SSAValue, str] = field(default_factory=dict)  # ids that the loops define
    last: SSAValue | None = None  # the index of the innermost loop
    skip: set[Operation] = field(default_factory=set)  # ops the loops replace
    row: SSAValue | None = None  # a row-by-row kernel's row, where the nest runs all rows
    rows: int = 0  # and their count (then the outermost loop, i0)


def _find(ops: list[Operation], kind: type, lhs: SSAValue, size: int | None = None) -> Any:
    """The first op of `ops` of class `kind` (a `divui`, `remui`) on `lhs`, and by the
    constant `size` when given; else None."""
    return next(
        (
            o
            for o in ops
            if isinstance(o, kind) and o.lhs == lhs and (size is None or constant(o.rhs) == size)
        ),
        None,
    )


def _chain(block: Block, gid: SSAValue, lo: int) -> list[Segment] | None:
    """The `scf.if gid < end` chain at the end of `block`, one segment per kernel."""
    ifs = [op for op in block.ops if isinstance(op, scf.IfOp)]
    if len(ifs) != 1:
        return None
    branch = ifs[0]
    cmp = branch.cond.owner
    if not isinstance(cmp, arith.CmpiOp) or cmp.predicate.value.data != 6 or cmp.lhs != gid:
        return None  # 6: ult
    hi = constant(cmp.rhs)
    if hi is None or hi <= lo:
        return None
    then = branch.true_region.block
    lid: SSAValue = gid
    for op in then.ops:
        if isinstance(op, arith.SubiOp) and op.lhs == gid and constant(op.rhs) == lo:
            lid = op.result
            break
    segments = [Segment(lo, hi, then, lid)]
    if branch.false_region.blocks:
        rest = _chain(branch.false_region.block, gid, hi)
        if rest is None:
            return None
        segments += rest
    return segments


def _delinearize(seg: Segment) -> None:
    """Loop counts and loop-variable names for the `remui`/`divui` chain of `seg.lid`."""
    ops = list(seg.block.ops)
    x, inner, left = seg.lid, [], seg.hi - seg.lo
    while True:
        rem = _find(ops, arith.RemUIOp, x)
        size = constant(rem.rhs) if rem is not None else None
        div = _find(ops, arith.DivUIOp, x, size)
        if rem is None or div is None or not size or left % size:
            break  # (a radix that does not divide the count is no loop of the nest)
        left //= size
        inner.append((rem, size, div))
        seg.skip |= {rem, div}
        x = div.result
    count = seg.hi - seg.lo
    sizes = [size for _, size, _ in inner]
    outer = count
    for size in sizes:
        outer //= size
    dims = [outer, *reversed(sizes)]
    o = 0 if seg.row is None else 1  # where the nest runs all rows, they are loop i0
    depth = len(dims)
    prefixes = [f"i{o}"]  # prefixes[k]: the linear index of loops 0..k
    for k in range(1, depth):
        prefixes.append(f"({prefixes[-1]}) * {dims[k]} + i{k + o}")
    for k, (rem, _, div) in enumerate(inner):
        seg.names[rem.result] = f"i{depth - 1 - k + o}"
        seg.names[div.result] = f"({prefixes[depth - 2 - k]})"  # what lies outside dim k
    seg.names[x] = f"i{o}"
    seg.last = inner[0][0].result if inner else x
    seg.names[seg.lid] = f"({prefixes[-1]})"
    if x is seg.lid:
        seg.names[seg.lid] = f"i{o}"
    if isinstance(seg.lid.owner, arith.SubiOp):
        seg.skip.add(seg.lid.owner)
    seg.dims = dims
    if seg.row is not None:
        seg.names[seg.row] = "i0"
        seg.dims = [seg.rows, *dims]


def _trips(block: Block) -> int:
    """Iterations of the innermost loops of `block` per point (1 without loops)."""
    best = 1
    for op in block.ops:
        if isinstance(op, scf.ForOp):
            lo, hi, st = constant(op.lb), constant(op.ub), constant(op.step)
            n = (hi - lo) // st if lo is not None and hi is not None and st else 1
            best = max(best, n * _trips(op.body.block))
        elif isinstance(op, scf.IfOp):
            for region in (op.true_region, op.false_region):
                if region.blocks:
                    best = max(best, _trips(region.block))
    return best


def _innermost_reduction(block: Block) -> scf.ForOp | None:
    """The innermost `scf.for` with carried values under `block`, if there is one."""
    found = None
    for op in block.walk():
        if (
            isinstance(op, scf.ForOp)
            and op.iter_args
            and not any(isinstance(o, scf.ForOp) for o in op.body.block.ops)
        ):
            found = op
    return found


def _split(loop: scf.ForOp) -> tuple[int, int, Operation, Operation] | None:
    """(C, N / C, div, rem) when the loop runs k over [0, N) and reads `k / C` and `k % C`
    (a reduction over a dim that a view split in two), else None."""
    lo, hi, st = constant(loop.lb), constant(loop.ub), constant(loop.step)
    iv = loop.body.block.args[0]
    ops = list(loop.body.block.ops)
    div = _find(ops, arith.DivUIOp, iv)
    if lo != 0 or st != 1 or hi is None or div is None:
        return None
    size = constant(div.rhs)
    rem = _find(ops, arith.RemUIOp, iv, size)
    if rem is None or not size or hi % size:
        return None
    return size, hi // size, div, rem


def _along_reduction(loop: scf.ForOp, last: SSAValue | None, count: int) -> bool:
    """Whether to vectorise `loop` (a reduction) rather than the innermost loop over
    points: when it adds up reads that are contiguous along it, unless every read is
    contiguous or the same across neighbouring points (a long enough innermost loop)."""
    iv = loop.body.block.args[0]
    y = loop.body.block.last_op
    adds = y is not None and all(type(v.owner) in REDUCING for v in y.operands)
    loads = [o for o in loop.body.walk() if isinstance(o, memref.LoadOp)]
    along = any(o.indices and o.indices[-1] == iv for o in loads)
    across = (
        last is not None
        and count >= 8
        and all(
            (o.indices and o.indices[-1] == last) or not any(depends(i, last) for i in o.indices)
            for o in loads
        )
    )
    return adds and along and not across


def _blocked(seg: Segment, plan: pack.Plan) -> bool:
    """Whether a dot-product segment is better packed by `plan` (see `pack`): its sums
    then run in register blocks of several outputs, each read of the pack serving all."""
    return plan.j is not None and min(seg.dims[plan.j], plan.nest.count) >= pack.BLOCKED


class CPURenderer(Renderer):
    """Renders kernels for `CTarget` as loop nests (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(CTarget())
        self.pragmas: dict[Operation, str] = {}
        self.sharing = True  # segments' loops are shared among the OpenMP team

    def kernel(self, fn: gpu.FuncOp) -> str:
        block = fn.body.block
        gid = next(
            (
                op.result
                for op in block.ops
                if isinstance(op, arith.AddiOp) and isinstance(op.lhs.owner, arith.MuliOp)
            ),
            None,
        )
        segments = _chain(block, gid, 0) if gid is not None else None
        if not segments or any(isinstance(o, scf.WhileOp) for o in fn.walk()):
            return super().kernel(fn)
        self.names, self.lines, self.pragmas = {}, [], {}
        head = self.head(fn)
        self.names[gid] = "g"
        work = sum((s.hi - s.lo) * _trips(s.block) for s in segments)
        self.emit(f"#pragma omp parallel if({work} >= {self.t.parallel_work})", 1)
        self.emit("{", 1)
        for op in block.ops:  # inside the region: gcc then sees them as constants
            if isinstance(op, arith.ConstantOp):
                self.op(op, 1)
        for seg in segments:
            self.segment(seg)
        self.emit("}", 1)
        return head + "\n".join(self.lines) + "\n}\n"

    def work_shared(self, clause: str, depth: int) -> None:
        """`#pragma omp for <clause>` before a segment's loops; where `sharing` is off
        (the phases of a row-by-row kernel, one thread a row) only its `simd`."""
        if self.sharing:
            self.emit(f"#pragma omp for {clause}", depth)
        elif clause.startswith("simd"):
            self.emit("#pragma omp simd", depth)

    def segment(self, seg: Segment) -> None:
        _delinearize(seg)
        self.names.update(seg.names)
        depth = len(seg.dims)
        reduction = _innermost_reduction(seg.block)
        along = reduction is not None and _along_reduction(reduction, seg.last, seg.dims[-1])
        atomic = any(isinstance(o, memref.AtomicRMWOp) for o in seg.block.walk())
        if atomic:  # adds to points that may repeat: a plain nest, no simd
            along, inner_simd = False, False
        elif reduction is not None and self.lanes(seg, only_blocked=along):
            return
        elif along:
            y = reduction.body.block.last_op
            for kind in ("+", "max"):
                accs = [self.name(r) for r, v in zip(reduction.results, y.operands)  # type: ignore[union-attr]
                        if REDUCING[type(v.owner)] == kind]  # fmt: skip
                if accs:
                    clause = f"reduction({kind}:{', '.join(accs)})"
                    self.pragmas[reduction] = (
                        f"{self.pragmas.get(reduction, '#pragma omp simd')} {clause}"
                    )
            inner_simd = False
        else:
            inner_simd = True
        if depth == 1:
            self.work_shared("simd nowait" if inner_simd else "nowait", 1)
        else:
            self.work_shared(f"collapse({depth - 1 if inner_simd else depth}) nowait", 1)
        for k, n in enumerate(seg.dims):
            if k == depth - 1 and inner_simd and depth > 1:
                self.emit("#pragma omp simd", 1)
            self.emit(f"for (long i{k} = 0; i{k} < {n}; i{k}++)", 1)
        self.emit("{", 1)
        self.emit(f"long g = {seg.lo} + {seg.names[seg.lid]};", 2)
        self.block([op for op in seg.block.ops if op not in seg.skip], 2)
        self.emit("}", 1)

    def lanes(self, seg: Segment, only_blocked: bool = False) -> bool:
        """Renders `seg` LANES points at a time (see `lanes`); False where it cannot, and,
        with `only_blocked` (a dot product), where no packing blocks its sums."""
        ops = [op for op in seg.block.ops if op not in seg.skip]
        ids = {seg.lid, *(op.lhs for op in seg.skip if isinstance(op, arith.SubiOp))}
        ids.discard(seg.last)  # a one-dim segment: its flat id is its index
        if seg.last is None or any(v in ids for o in ops for w in o.walk() for v in w.operands):
            return False  # the flat id itself is read: not a plain loop nest
        packing = pack.choose(seg, ops)
        if packing is not None and (not only_blocked or _blocked(seg, packing[0])):
            pack_render.render(self, seg, *packing)
            return True
        if only_blocked:
            return False
        varying = lane_values(seg.block, seg.last)
        if varying is None:
            return False
        depth, n = len(seg.dims), seg.dims[-1]
        if depth == 1:
            self.work_shared("nowait", 1)
        else:
            self.work_shared(f"collapse({depth - 1}) nowait", 1)
        for k, size in enumerate(seg.dims[:-1]):
            self.emit(f"for (long i{k} = 0; i{k} < {size}; i{k}++)", 1)
        width = WIDE if n >= WIDE else LANES
        self.emit(f"for (long b = 0; b < {n}; b += {width}) {{", 1)
        self.emit(f"const long n = {n} - b < {width} ? {n} - b : {width};", 2)
        self.names[seg.last] = "(b + l)"
        LaneRenderer(self, varying, width=width).block(ops, 2, [])
        self.emit("}", 1)
        return True

    def loop(self, op: scf.ForOp, depth: int) -> None:
        pragma = self.pragmas.get(op)
        if pragma is None:
            return super().loop(op, depth)
        for res, init in zip(op.results, op.iter_args):  # declared before the pragma
            self.emit(f"{ctype(res.type)} {self.name(res)} = {self.name(init)};", depth)
        split = _split(op)
        if split is None:
            self.emit(pragma, depth)
            return super().loop(op, depth, declared=True)
        # `k / C` and `k % C` read the reduction index: two loops, the inner one contiguous
        size, count, div, rem = split
        body = op.body.block
        for res, arg in zip(op.results, body.args[1:]):
            self.names[arg] = self.name(res)
        k, outer, inner = (
            self.name(body.args[0]),
            f"{self.name(body.args[0])}o",
            f"{self.name(body.args[0])}i",
        )
        self.names[div.result], self.names[rem.result] = outer, inner
        self.emit(f"for (long {outer} = 0; {outer} < {count}; {outer}++)", depth)
        self.emit(pragma, depth)
        self.emit(f"for (long {inner} = 0; {inner} < {size}; {inner}++) {{", depth)
        self.emit(f"long {k} = {outer} * {size} + {inner};", depth + 1)
        self.block([o for o in body.ops if o not in (div, rem)], depth + 1)
        y = body.last_op
        if isinstance(y, scf.YieldOp):
            for res, v in zip(op.results, y.operands):
                self.emit(f"{self.name(res)} = {self.name(v)};", depth + 1)
        self.emit("}", depth)
