"""Buffer planning: every `kernel.alloc` of a function gets an offset in one arena.

Host ops are numbered in program order (a `kernel.for` spans its body). A temporary
lives from its first use to its last; where its value may cross a loop's back
edge (it is used inside a loop it is not defined in, and the loop's first
access to it is not a write of the whole buffer) it lives over the whole loop.
Buffers whose ranges do not overlap may share memory; they are placed first-fit
by decreasing size, at offsets aligned to 64 bytes:

```
%a = kernel.alloc : memref<2x4xf32>      // live [1, 2]  -> offset 0
%b = kernel.alloc : memref<2x4xf32>      // live [2, 3]  -> offset 64
%c = kernel.alloc : memref<2x4xf32>      // live [3, 4]  -> offset 0 (reuses %a)
```

`kernel-plan-buffers` writes the offsets onto the allocs and the arena size as
`gradfuse.peak_bytes` on the module, in the `default` and `cuda` pipelines;
`convert-kernel-to-gpu` then lays the arena out at those offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, IntegerType, MemRefType, ModuleOp, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import AffineDimExpr
from xdsl.passes import ModulePass

from gradfuse import affine
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import kernel as kd
from gradfuse.dialects.kernel import ForOp

ALIGNMENT = 64
"""Byte alignment of every buffer in the arena."""


def nbytes(ty: Attribute) -> int:
    """Bytes of a memref (`memref<2x4xf32>`: 32); i1 and other sub-byte types take a byte."""
    assert isinstance(ty, MemRefType)
    return prod(ty.get_shape()) * element_bytes(ty)


def element_bytes(ty: MemRefType) -> int:
    """Bytes of one element of a memref (f32: 4; i1 takes a byte)."""
    et = ty.element_type
    width = et.width.data if isinstance(et, IntegerType) else getattr(et, "bitwidth", None)
    if width is None:
        raise GradfuseError(f"buffer planning: no size known for element type {et}")
    return max(1, (width + 7) // 8)


def align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass
class BufferPlan:
    """Where each temporary lives in the arena, and when it is live."""

    offsets: dict[SSAValue, int] = field(default_factory=dict)
    sizes: dict[SSAValue, int] = field(default_factory=dict)
    ranges: dict[SSAValue, tuple[int, int]] = field(default_factory=dict)
    """Inclusive program-order positions of the first and last host op that needs it."""
    peak_bytes: int = 0
    """The arena size: the end of the highest buffer."""


class _Order:
    """Program-order positions of the host ops of a function and the span of each loop."""

    def __init__(self, fn: func.FuncOp):
        self.pos: dict[Operation, int] = {}
        self.spans: dict[ForOp, tuple[int, int]] = {}
        self._visit(fn.body.block)

    def _visit(self, block: Block) -> None:
        for op in block.ops:
            self.pos[op] = len(self.pos)
            if isinstance(op, ForOp):
                self._visit(op.body.block)
                self.spans[op] = (self.pos[op], len(self.pos) - 1)

    def host(self, op: Operation) -> Operation:
        """The host op that holds `op` (a kernel inside a group: the group)."""
        while op not in self.pos:
            parent = op.parent_op()
            assert parent is not None, f"{op.name} is outside the function"
            op = parent
        return op

    def loops(self, op: Operation) -> list[ForOp]:
        """The loops around a host op, innermost first."""
        out = []
        parent = op.parent_op()
        while parent is not None and parent in self.pos:
            if isinstance(parent, ForOp):
                out.append(parent)
            parent = parent.parent_op()
        return out


def used_extent(buffer: SSAValue) -> tuple[int, ...]:
    """Per axis of `buffer`, one past the largest index that any kernel's access of it
    reaches: its size, or less where the end is never touched (a row that
    `kernel-pad-rows` padded); its shape where an access is not affine in the kernel's
    dims or a host op uses it."""
    ty = buffer.type
    assert isinstance(ty, MemRefType)
    shape = tuple(ty.get_shape())
    reach = [0] * len(shape)
    for use in buffer.uses:
        k = use.operation
        if not isinstance(k, kd.KernelOp):
            return shape
        arg = k.buffer_args[use.index]
        for access in arg.uses:
            op = access.operation
            if not isinstance(op, kd.LoadOp | kd.StoreOp) or op.buffer != arg:
                return shape
            for axis, e in enumerate(op.map.data.results):
                try:
                    reach[axis] = max(reach[axis], affine.bounds(e, k.domain_sizes)[1] + 1)
                except ValueError:
                    return shape
    return tuple(min(r, n) for r, n in zip(reach, shape))


def _covers(k: kd.KernelOp, arg: SSAValue, extent: tuple[int, ...]) -> bool:
    """Whether kernel `k` stores to every element of `extent` (the elements of its
    buffer argument `arg` that any kernel accesses: `used_extent`)."""
    sizes = k.domain_sizes
    for use in arg.uses:
        store = use.operation
        if not isinstance(store, kd.StoreOp) or store.buffer != arg:
            continue
        results = store.map.data.results
        dims = [e.position for e in results if isinstance(e, AffineDimExpr)]
        if len(dims) == len(results) == len(set(dims)) and all(
            sizes[d] == n for d, n in zip(dims, extent)
        ):
            return True
    return False


def writes_whole(op: Operation, buffer: SSAValue) -> bool:
    """Whether host op `op` overwrites all of `buffer` without reading it first."""
    if isinstance(op, kd.FeedOp):
        return op.buffer == buffer
    if isinstance(op, kd.AllReduceOp):
        return op.target == buffer and op.source != buffer
    kernels = list(op.body.block.ops) if isinstance(op, kd.LAUNCH_GROUPS) else [op]
    whole, extent = False, None
    for k in kernels:
        if not isinstance(k, kd.KernelOp):
            return False
        for arg, buf in zip(k.buffer_args, k.buffers):
            if buf != buffer:
                continue
            if any(isinstance(u.operation, kd.LoadOp) for u in arg.uses):
                return False
            if not whole:
                if extent is None:  # (only where a kernel stores to it: it walks all uses)
                    extent = used_extent(buffer)
                whole = _covers(k, arg, extent)
    return whole


def _carried(order: _Order, buffer: SSAValue, users: list[Operation], loop: ForOp) -> bool:
    """Whether `buffer`'s value may cross the back edge of `loop`."""
    lo, hi = order.spans[loop]
    inside = sorted((u for u in users if lo <= order.pos[u] <= hi), key=order.pos.__getitem__)
    first = inside[0]
    for inner in order.loops(first):
        if inner is loop:
            break
        if inner.trip_count < 1:
            return True
    return not writes_whole(first, buffer)


def live_ranges(fn: func.FuncOp) -> tuple[dict[SSAValue, tuple[int, int]], list[kd.AllocOp]]:
    """The live range of every `kernel.alloc` of `fn`, in program-order positions."""
    order = _Order(fn)
    allocs = [op for op in order.pos if isinstance(op, kd.AllocOp)]
    ranges: dict[SSAValue, tuple[int, int]] = {}
    for alloc in allocs:
        value = alloc.result
        users = list(dict.fromkeys(order.host(u.operation) for u in value.uses))
        if not users:
            ranges[value] = (order.pos[alloc], order.pos[alloc])
            continue
        lo = min(order.pos[u] for u in users)
        hi = max(order.pos[u] for u in users)
        around_def = set(order.loops(alloc))
        for user in users:
            for loop in order.loops(user):
                if loop not in around_def and _carried(order, value, users, loop):
                    lo, hi = min(lo, order.spans[loop][0]), max(hi, order.spans[loop][1])
        ranges[value] = (lo, hi)
    return ranges, allocs


def _first_fit(starts: np.ndarray, ends: np.ndarray, size: int) -> int:
    """The lowest offset where `size` bytes fit below, between or above the live buffers
    [starts, ends) (ends aligned), scanning them by offset: starts [0, 128], ends [64, 192],
    size 64 -> 64."""
    if starts.size == 0:
        return 0
    by_offset = np.argsort(starts, kind="stable")
    starts, ends = starts[by_offset], ends[by_offset]
    # the candidate offset before buffer i: the highest aligned end among those before it
    reach = np.maximum.accumulate(ends)
    candidate = np.concatenate(([0], reach[:-1]))
    fits = np.flatnonzero(candidate + size <= starts)
    return int(candidate[fits[0]] if fits.size else reach[-1])


def plan_buffers(fn: func.FuncOp, annotate: bool = False) -> BufferPlan:
    """Offsets for the temporaries of `fn` (first-fit by decreasing size, 64-byte aligned).

    With `annotate`, each `kernel.alloc` gets its `offset` property:
    `%t = kernel.alloc {offset = 64 : i64} : memref<2x4xf32>`.
    """
    ranges, allocs = live_ranges(fn)
    plan = BufferPlan(ranges=ranges)
    first = {a.result: i for i, a in enumerate(allocs)}
    for a in allocs:
        plan.sizes[a.result] = nbytes(a.result.type)
    order = sorted(plan.sizes, key=lambda v: (-plan.sizes[v], first[v]))
    placed = np.zeros((len(order), 4), dtype=np.int64)  # offset, aligned end, live start, end
    for n, value in enumerate(order):
        size, (lo, hi) = plan.sizes[value], ranges[value]
        rows = placed[:n]
        live = rows[(rows[:, 3] >= lo) & (rows[:, 2] <= hi)]
        offset = _first_fit(live[:, 0], live[:, 1], size)
        placed[n] = (offset, align(offset + size), lo, hi)
        plan.offsets[value] = offset
        plan.peak_bytes = max(plan.peak_bytes, offset + size)
    if annotate:
        for a in allocs:
            a.properties["offset"] = IntegerAttr(plan.offsets[a.result], i64)
    return plan


def module_peak_bytes(module: ModuleOp, annotate: bool = False) -> int:
    """The largest arena among the module's functions (0 without temporaries)."""
    peak = 0
    for op in module.body.block.ops:
        if isinstance(op, func.FuncOp) and op.body.blocks:
            try:
                peak = max(peak, plan_buffers(op, annotate).peak_bytes)
            except AssertionError as err:
                raise GradfuseError(f"buffer planning: {err}", position_of(op.location)) from err
    return peak


class KernelPlanBuffersPass(ModulePass):
    """Gives every `kernel.alloc` its arena offset and records `gradfuse.peak_bytes`.

    `ir-opt model.mlir -p kernel-plan-buffers`:
    `builtin.module attributes {gradfuse.peak_bytes = 96 : i64} { ... }`
    """

    name = "kernel-plan-buffers"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        op.attributes["gradfuse.peak_bytes"] = IntegerAttr(module_peak_bytes(op, True), i64)
