"""What every launch of a fused program is, statically: its layers, direction, work.

`launches(module)` reads a module after the `kernels` pipeline (kernel IR) and returns
one `Launch` per launch site in program order: each `kernel.kernel` outside a group,
each `kernel.group` and `kernel.rows` (several kernels, one launch), and each host
callback (`kernel.feed`: a feeder, `kernel.receive`: a receiver). `kernel_table()`
renders them with PyProf's columns; its Time column stays empty until a backend times
the launches.

    from gradfuse.passes import run_pipeline
    run_pipeline(module, "kernels")
    for launch in launches(module):
        print(launch.idx, launch.symbol, launch.op, launch.flops, launch.layers)
    print(kernel_table(launches(module)))
    # Idx  Direction  Layer    Op           Kernel  Params           FLOPs  Read  Written ...
    # 1    fprop      main.0   contraction  k0      [8, 512 | 1600]  13.1M  ...

Counting rules (per execution of the launch; loops are not multiplied in, see
`Launch.loops` and `Launch.executions`):

- FLOPs. A kernel's domain has parallel dims P and reduced dims R. Its body ops before
  the `kernel.reduce`s (the prologue) and the reduces run at ΠP·ΠR points, the ops after
  them (the epilogue, or the whole body of a kernel without reduction) at ΠP points.
  Per point, each `arith`/`math` op with a float operand counts 1 (`addf`, `mulf`,
  `divf`, `maximumf`, `cmpf`, `exp2`, `sqrt`, ...; not constants, `select` or casts),
  each `kernel.reduce` counts 1 (an add or a max per reduced point) and each
  `kernel.scatter_add` counts 1. A multiply-accumulate is a `mulf` feeding a
  `kernel.reduce add`, so it counts 2 and a contraction comes out as 2·ΠP·ΠR.
  The points that a stride's phase leaves dead are left out of ΠP·ΠR (`live_share`: a
  transposed convolution of stride 2 multiplies its input at one tap in 4, and torch
  counts it by its input's size); padding's taps count, as torch's do.
  A group's or rows' FLOPs are the sum of its kernels'.
- Inner FLOPs (`KernelWork.inner_flops`): the multiply-adds alone, each `kernel.reduce`
  and the `mulf` that makes its operand, at ΠP·ΠR points: 2·ΠP·ΠR for a contraction,
  what torch counts for a matmul or conv. Other prologue ops, elementwise work fused in
  front of the product and recomputed at every point (a batch norm's backward before a
  weight gradient), count in `flops` and not here.
- Bytes. Each `kernel.load`/`kernel.gather` reads, and each `kernel.store`/
  `kernel.scatter_add` writes, element size x the distinct elements it touches,
  taken as min(Π of the sizes of the domain dims its map uses, elements of the buffer):
  a load `(d0, d2)` over [P0, P1 | R] touches P0·R elements, not P0·P1·R. This is exact
  for permutations, projections and broadcasts and an upper bound otherwise (windows,
  guarded padding). A feeder writes its buffer, a receiver reads its buffers.
- Direction shares: each body op's direction (`gradfuse.provenance`) weighted by its
  FLOPs as above; a launch with no FLOPs is weighted by its body ops instead. Ops with
  no origin (no file and no module path, as `gradfuse.dump` skips them) do not count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from math import prod

from xdsl.dialects import func
from xdsl.dialects.builtin import AnyFloat, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineSet

from gradfuse.affine import guard_share
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import kernel as K
from gradfuse.passes.kernel.plan_buffers import element_bytes, nbytes
from gradfuse.passes.kernel.split_phases import dead_phases
from gradfuse.profiler.text import cut, render, si, sources_text
from gradfuse.provenance import provenance_of

UNATTRIBUTED = "(no module)"
"""The layer of ops recorded outside every `nn.Module` (a loss written inline)."""

_NOT_FLOPS = (
    "arith.constant", "arith.select", "arith.extf", "arith.truncf", "arith.sitofp",
    "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.bitcast", "arith.index_cast",
)  # fmt: skip


@dataclass(frozen=True)
class Loop:
    """A `kernel.for` around a launch: its index among the program's loops (program
    order, from 0) and its trip count."""

    index: int
    trips: int


@dataclass(frozen=True)
class KernelWork:
    """The static work of one `kernel.kernel`: see the module docstring for the rules."""

    symbol: str
    kind: str
    domain: tuple[int, ...]
    parallel: int
    flops: int
    bytes_read: int
    bytes_written: int
    origins: frozenset[tuple[str | None, str]]
    """(module path or None, direction) of every body op with an origin."""
    direction_weights: dict[str, int]
    """Direction -> FLOPs of its body ops (or op count where the kernel has no FLOPs)."""
    sources: tuple[str, ...]
    """`file:line` (file's base name) of the body ops, distinct, in body order."""
    layers: tuple[str, ...] = ()
    """Module paths of the body ops, distinct, in body order."""
    inner_flops: int = 0
    """The multiply-adds: each reduce and the `mulf` feeding it, at every domain point;
    2·ΠP·ΠR for a contraction, what torch counts for a matmul or conv. Prologue ops fused
    in front of the product count in `flops` only."""
    layer_weights: dict[str, int] = field(default_factory=dict)
    """Layer (module path, `UNATTRIBUTED` for ops outside modules) -> its FLOPs (or op
    count where the kernel has no FLOPs), weighed as `direction_weights`."""

    @property
    def params(self) -> str:
        """The domain as the listing prints it: `[8, 512 | 1600]`."""
        dims = list(self.domain)
        text = ", ".join(map(str, dims[: self.parallel]))
        if self.parallel < len(dims):
            text += " | " + ", ".join(map(str, dims[self.parallel :]))
        return f"[{text}]"


@dataclass(frozen=True)
class Launch:
    """One launch site (or host callback) of the program, in program order.

    `op` is the kernel kind, `"rows: reduction, reduction"` for a rows launch, `"group:
    ..."` for a horizontal group, `"feeder"` or `"receiver"` for a host callback.
    """

    idx: int
    symbol: str
    op: str
    kernels: tuple[KernelWork, ...]
    loops: tuple[Loop, ...]
    """The `kernel.for`s around it, outermost first."""
    params: str
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    layers: tuple[str, ...] = ()
    """Module paths of every op fused into the launch (all members), first-seen order."""
    origins: frozenset[tuple[str | None, str]] = frozenset()
    shares: dict[str, float] = field(default_factory=dict)
    """Direction -> its share of the launch (FLOPs, or body ops where no FLOPs)."""
    sources: tuple[str, ...] = ()
    layer_shares: dict[str, float] = field(default_factory=dict)
    """Layer -> its share of the launch, weighed as `shares` (ops outside every module
    count for `UNATTRIBUTED`): what a profile splits the launch's time by."""

    @property
    def is_kernel(self) -> bool:
        return bool(self.kernels)

    @property
    def executions(self) -> int:
        """How often one run executes it: the product of its loops' trip counts."""
        return prod(loop.trips for loop in self.loops)

    @property
    def direction(self) -> str:
        """PyProf's Direction: fprop, bprop or optimizer; a mixed launch shows the
        shares (`fprop 60% bprop 40%`); a host callback shows `host`."""
        return direction_of(self.shares) if self.kernels else "host"


def direction_of(shares: dict[str, float]) -> str:
    """PyProf's Direction of work with these direction shares: `fprop`, `bprop`,
    `optimizer`, or the mix `fprop 60% bprop 40%` (`-` for none)."""
    names = {"forward": "fprop", "backward": "bprop", "optimizer": "optimizer"}
    parts = sorted(shares.items(), key=lambda kv: -kv[1])
    if not parts:
        return "-"
    if len(parts) == 1:
        return names[parts[0][0]]
    return " ".join(f"{names[d]} {round(100 * s) or '<1'}%" for d, s in parts)


LIVE_POINTS = 1 << 24
"""The most points `live_share` counts (over the dims its phases read); past it every
point counts, an upper bound."""


def live_share(k: K.KernelOp) -> float:
    """The share of `k`'s domain that does work: 1, but for the taps a stride's phase
    leaves dead (`split_phases.dead_phases`: a transposed convolution of stride 2 reads
    its input at one tap in 4), which torch does not count either (it counts a
    transposed convolution by its input's size). Padding's taps count, as torch's do.

        live_share(k)  # 0.25: [8, 256, 8, 8 | 512, 4, 4] of stride 2
    """
    phases = dead_phases(k)
    if not phases:
        return 1.0
    return guard_share(
        AffineSet(len(k.domain_sizes), 0, tuple(phases)), k.domain_sizes, LIVE_POINTS
    )


def _op_flops(op: Operation) -> int:
    """FLOPs of one body op at one point."""
    if isinstance(op, K.ReduceOp | K.ScatterAddOp):
        return 1
    dialect = op.name.split(".", 1)[0]
    if dialect not in ("arith", "math") or op.name in _NOT_FLOPS:
        return 0
    return int(any(isinstance(o.type, AnyFloat) for o in op.operands))


def _multiplies(reduce: K.ReduceOp) -> int:
    """1 when the reduce is a multiply-accumulate (`reduce add` of a float `mulf`), else 0."""
    owner = reduce.value.owner
    if reduce.kind.data != "add" or not isinstance(owner, Operation) or owner.name != "arith.mulf":
        return 0
    return _op_flops(owner)


def _touched(op: K.LoadOp | K.StoreOp | K.GatherOp | K.ScatterAddOp, dims: Sequence[int]) -> int:
    """Distinct elements an access touches: min(Π used dim sizes, buffer elements)."""
    used, ty = op.map.data.used_dims(), op.buffer.type
    assert isinstance(ty, MemRefType)
    return min(prod(dims[i] for i in used), prod(ty.get_shape()))


def kernel_work(k: K.KernelOp) -> KernelWork:
    """The FLOPs, bytes, origins and direction weights of one kernel.

    For `k0 contraction [8, 512 | 100]` with body `load x(d0, d2)`, `load w(d1, d2)`,
    `mulf`, `reduce add`, `store h(d0, d1)`: flops 2·8·512·100, reads 4·(8·100 + 512·100).
    """
    dims = k.domain_sizes
    prologue, reduces, epilogue = k.phases()
    full, outer = round(prod(dims) * live_share(k)), prod(dims[: k.num_parallel])
    points: dict[Operation, int] = {op: full for op in [*prologue, *reduces]}
    points.update({op: outer for op in epilogue})
    flops = read = written = inner = 0
    by_direction: dict[str, int] = {}
    by_ops: dict[str, int] = {}
    layer_flops: dict[str, int] = {}
    layer_ops: dict[str, int] = {}
    origins: set[tuple[str | None, str]] = set()
    sources: list[str] = []
    layers: list[str] = []
    for op in k.body.block.ops:
        f = _op_flops(op) * points[op]
        flops += f
        if isinstance(op, K.ReduceOp):
            inner += f * (1 + _multiplies(op))
        if isinstance(op, K.LoadOp | K.GatherOp | K.StoreOp | K.ScatterAddOp):
            rank = op.map.data.num_dims
            n = _touched(op, dims[:rank]) * element_bytes(op.buffer.type)  # type: ignore[arg-type]
            if isinstance(op, K.LoadOp | K.GatherOp):
                read += n
            else:
                written += n
        p = provenance_of(op.location)
        if p.file is None and p.module_path is None:
            continue
        origins.add((p.module_path, p.direction))
        if p.module_path is not None and p.module_path not in layers:
            layers.append(p.module_path)
        by_direction[p.direction] = by_direction.get(p.direction, 0) + f
        by_ops[p.direction] = by_ops.get(p.direction, 0) + 1
        name = p.module_path or UNATTRIBUTED
        layer_flops[name] = layer_flops.get(name, 0) + f
        layer_ops[name] = layer_ops.get(name, 0) + 1
        if p.file is not None and p.source not in sources:
            sources.append(p.source)
    weights = by_direction if flops else by_ops
    return KernelWork(
        k.sym_name.data, k.kind.data, dims, k.num_parallel, flops, read, written,
        frozenset(origins), dict(weights), tuple(sources), tuple(layers), inner,
        layer_flops if flops else layer_ops,
    )  # fmt: skip


def _launch(idx: int, op: Operation, loops: tuple[Loop, ...]) -> Launch:
    if isinstance(op, K.KernelOp):
        members = [op]
        kind, params = op.kind.data, ""
    else:
        assert isinstance(op, K.GroupOp | K.RowsOp)
        members = [k for k in op.body.block.ops if isinstance(k, K.KernelOp)]
        how = "group" if isinstance(op, K.GroupOp) else "rows"
        kinds = [k.kind.data for k in members]
        counts = {x: kinds.count(x) for x in kinds}
        kind = f"{how}: " + ", ".join(x if n == 1 else f"{x} x{n}" for x, n in counts.items())
        params = f"rows {list(op.row_sizes)}: " if isinstance(op, K.RowsOp) else ""
    works = tuple(kernel_work(k) for k in members)
    params += "; ".join(w.params for w in works)
    layers: list[str] = []
    sources: list[str] = []
    weights: dict[str, int] = {}
    by_layer: dict[str, int] = {}
    flops = sum(w.flops for w in works)
    for w in works:
        layers += [path for path in w.layers if path not in layers]
        sources += [s for s in w.sources if s not in sources]
        if flops and not w.flops:
            continue  # a member without FLOPs weighs nothing beside FLOPs
        for d, n in w.direction_weights.items():
            weights[d] = weights.get(d, 0) + n
        for name, n in w.layer_weights.items():
            by_layer[name] = by_layer.get(name, 0) + n
    return Launch(
        idx, op.sym_name.data, kind, works, loops, params, flops,
        sum(w.bytes_read for w in works), sum(w.bytes_written for w in works),
        tuple(layers), frozenset().union(*(w.origins for w in works)), _shares(weights),
        tuple(sources), _shares(by_layer),
    )  # fmt: skip


def _shares(weights: dict[str, int]) -> dict[str, float]:
    """Each key's share of the total weight (keys of weight 0 left out)."""
    total = sum(weights.values())
    return {k: n / total for k, n in weights.items() if n} if total else {}


def _walk(block: Block, loops: tuple[Loop, ...], counter: list[int]) -> Iterator[tuple]:
    for op in block.ops:
        if isinstance(op, K.ForOp):
            counter[0] += 1
            inner = (*loops, Loop(counter[0] - 1, op.trip_count))
            yield from _walk(op.body.block, inner, counter)
        elif isinstance(op, K.KernelOp | K.GroupOp | K.RowsOp | K.FeedOp | K.ReceiveOp):
            yield op, loops


def _host(idx: int, op: K.FeedOp | K.ReceiveOp, loops: tuple[Loop, ...]) -> Launch:
    buffers: list[SSAValue] = [op.buffer] if isinstance(op, K.FeedOp) else list(op.buffers)
    size = sum(nbytes(b.type) for b in buffers)
    shapes = "; ".join(str(list(b.type.get_shape())) for b in buffers)  # type: ignore[attr-defined]
    feeder = isinstance(op, K.FeedOp)
    return Launch(
        idx, op.key.data, "feeder" if feeder else "receiver", (), loops, shapes,
        bytes_read=0 if feeder else size, bytes_written=size if feeder else 0,
    )  # fmt: skip


_NOT_KERNEL_IR = ("tg", "gpu", "scf", "memref")
"""Dialects of the IR before (tg) and after (gpu, scf, memref) the kernel level."""


def launches(module: ModuleOp) -> list[Launch]:
    """One `Launch` per launch site and host callback of every function, program order
    (`Idx` from 1, as PyProf numbers rows). The module must be kernel IR (after the
    `kernels` pipeline), which this reads and does not change."""
    stage = next(
        (op.dialect_name() for op in module.walk() if op.dialect_name() in _NOT_KERNEL_IR), None
    )
    if stage is not None:
        raise GradfuseError(
            f"launches() reads kernel IR, and this module holds {stage} ops: run the"
            ' `kernels` pipeline on it first (run_pipeline(module, "kernels"))'
        )
    out: list[Launch] = []
    counter = [0]
    for f in module.ops:
        if not isinstance(f, func.FuncOp):
            continue
        for op, loops in _walk(f.body.block, (), counter):
            if isinstance(op, K.FeedOp | K.ReceiveOp):
                out.append(_host(len(out) + 1, op, loops))
            else:
                out.append(_launch(len(out) + 1, op, loops))
    return out


def kernel_table(rows: Sequence[Launch], *, layer_width: int = 40) -> str:
    """The launches as PyProf's kernel table, without times (a profile's
    `prof.kernel_table()` has them): Idx, Direction, Layer, Op, Kernel, Params, FLOPs,
    Read and Written bytes, Source.

        Idx  Direction  Layer   Op           Kernel  Params           FLOPs  ...
        2    fprop      main.0  contraction  k0      [8, 512 | 1600]  13.1M  ...
    """
    head = ("Idx", "Direction", "Layer", "Op", "Kernel", "Params", "FLOPs", "Read", "Written",
            "Source")  # fmt: skip
    table = [head]
    for r in rows:
        table.append((str(r.idx), r.direction, cut(",".join(r.layers), layer_width) or "-",
                      r.op, r.symbol, cut(r.params, 40), si(r.flops), si(r.bytes_read),
                      si(r.bytes_written), sources_text(r.sources)))  # fmt: skip
    return render(table)
