"""Lowering of one `kernel.kernel` (or `kernel.group`) to the body of a `gpu.func`
(`KernelBuilder`; `gpu_func.build_gpu_func` makes the function around it).

One thread per point of the parallel dims: the thread's linear id is
delinearised into the parallel indices, the reduction dims become `scf.for`
loops carrying one accumulator per `kernel.reduce`, and access maps become
`arith` index ops feeding `memref.load`/`memref.store`:

```
gpu.func @k0(%x: memref<2x4xf32>, %w: memref<4x4xf32>, %h: memref<2x4xf32>) kernel {
  %id = arith.addi (block_id x * block_dim x), thread_id x : index
  scf.if (%id < 8) {
    %i = arith.divui %id, %c4 : index
    %j = arith.remui %id, %c4 : index
    %s = scf.for %k = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (f32) {
      %a = memref.load %x[%i, %k] : memref<2x4xf32>
      ...
    }
    memref.store %s, %h[%i, %j] : memref<2x4xf32>
  }
  gpu.return
}
```

A group's kernels share one id space, each its own range of ids (a chain of
`scf.if`). Every op made from a kernel body op keeps that op's location.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from xdsl.dialects import arith, gpu, memref, scf
from xdsl.dialects.builtin import AnyFloat, IntegerAttr, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineConstraintKind,
    AffineDimExpr,
    AffineExpr,
    AffineSymExpr,
)

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import kernel as kd
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.philox import emit_uniform

_INIT = {"add": 0.0, "max": float("-inf")}
INDEX = fast.INDEX


def nonnegative(expr: AffineExpr) -> bool:
    """Whether `expr` is >= 0 for every non-negative dim value (`d0 * 4 + d1`: yes)."""
    if isinstance(expr, AffineDimExpr):
        return True
    if isinstance(expr, AffineConstantExpr):
        return expr.value >= 0
    if isinstance(expr, AffineBinaryOpExpr):
        return nonnegative(expr.lhs) and nonnegative(expr.rhs)
    return False


class KernelBuilder:
    """Builds the body of one `gpu.func`; index constants are shared at its entry.

    `KernelBuilder(entry).lower([k0, k1], buffer_args)` fills `entry` with the
    thread mapping and the lowered bodies of the kernels.
    """

    def __init__(self, entry: Block):
        self.entry = entry
        self.block = entry
        self._consts: dict[tuple[object, Attribute], SSAValue] = {}
        self._anchor: Operation | None = None
        self.dim_names = False  # name each loop index after its domain dim (`%d2`)

    # --- small helpers ---------------------------------------------------------------

    def add(self, op: Operation, loc: Attribute | None = None) -> SSAValue:
        """Appends `op` to the current block and returns its (first) result."""
        if loc is not None:
            op.location = loc
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def const(self, value: int | float, ty: Attribute = INDEX) -> SSAValue:
        """A constant of `ty` defined once at the top of the function."""
        key = (value, ty)
        if key not in self._consts:
            op = fast.constant(value, ty)
            self.hoist(op)
            self._consts[key] = op.result
        return self._consts[key]

    def hoist(self, op: Operation) -> None:
        """Puts `op` at the top of the function, before the thread ids (`thread_id`)."""
        if self._anchor is None:
            self.entry.add_op(op)
        else:
            self.entry.insert_op_before(op, self._anchor)

    @contextmanager
    def counted_loop(
        self, upper: int | SSAValue, inits: Sequence[SSAValue], loc: Attribute
    ) -> Iterator[tuple[Block, scf.ForOp]]:
        """`scf.for 0 to upper step 1` carrying `inits`, added here; ops added inside go into
        its body (block arguments: the index, then the carried values), which the caller
        ends with `scf.yield`."""
        body = Block(arg_types=[INDEX, *[a.type for a in inits]])
        lower = self.const(0)
        bound = upper if isinstance(upper, SSAValue) else self.const(upper)
        loop = fast.scf_for(lower, bound, self.const(1), inits, body)
        self.add(loop, loc)
        outer, self.block = self.block, body
        yield body, loop
        self.block = outer

    @contextmanager
    def if_then(self, cond: SSAValue, loc: Attribute) -> Iterator[None]:
        """Ops added inside go into the then block of an `scf.if cond` (empty else) added
        here after them."""
        outer, then = self.block, Block()
        self.block = then
        yield
        self.add(fast.scf_yield())
        self.block = outer
        self.add(fast.scf_if(cond, then, None), loc)

    def thread_id(self) -> SSAValue:
        """`gpu.thread_id x`, the first op after the hoisted ones (see `hoist`)."""
        tid = self.add(fast.gpu_index(gpu.ThreadIdOp))
        self._anchor = tid.owner  # type: ignore[assignment]
        return tid

    def expand(
        self,
        expr: AffineExpr,
        point: Sequence[SSAValue],
        loc: Attribute,
        symbols: Sequence[SSAValue] = (),
    ) -> SSAValue:
        """`expr` over the dims `point` (and `symbols`) as arith index ops
        (`d0 * 4 + d1` -> muli, addi)."""
        if isinstance(expr, AffineDimExpr):
            return point[expr.position]
        if isinstance(expr, AffineSymExpr) and expr.position < len(symbols):
            return symbols[expr.position]
        if isinstance(expr, AffineConstantExpr):
            return self.const(expr.value)
        if not isinstance(expr, AffineBinaryOpExpr):
            raise GradfuseError(f"access map symbols are not supported: {expr}", position_of(loc))
        lhs = self.expand(expr.lhs, point, loc, symbols)
        rhs = self.expand(expr.rhs, point, loc, symbols)
        kind, pos = expr.kind, nonnegative(expr.lhs) and nonnegative(expr.rhs)
        if kind == AffineBinaryOpKind.Add:
            return self.add(fast.index_op(arith.AddiOp, lhs, rhs), loc)
        if kind == AffineBinaryOpKind.Mul:
            return self.add(fast.index_op(arith.MuliOp, lhs, rhs), loc)
        if kind == AffineBinaryOpKind.FloorDiv:
            cls = arith.DivUIOp if pos else arith.FloorDivSIOp
            return self.add(fast.index_op(cls, lhs, rhs), loc)
        if kind == AffineBinaryOpKind.CeilDiv:
            cls = arith.CeilDivUIOp if pos else arith.CeilDivSIOp
            return self.add(fast.index_op(cls, lhs, rhs), loc)
        if pos:
            return self.add(fast.index_op(arith.RemUIOp, lhs, rhs), loc)
        rem = self.add(arith.RemSIOp(lhs, rhs), loc)  # affine mod is never negative
        neg = self.add(arith.CmpiOp(rem, self.const(0), "slt"), loc)
        return self.add(arith.SelectOp(neg, self.add(arith.AddiOp(rem, rhs), loc), rem), loc)

    # --- thread mapping --------------------------------------------------------------

    def lower(self, kernels: Sequence[kd.KernelOp], args: dict[SSAValue, SSAValue]) -> int:
        """Lowers `kernels` (one id range each) into the entry block; returns the thread count.

        `args` maps each kernel's buffer block arguments to the function's arguments.
        """
        tid = self.thread_id()
        block_id = self.add(fast.gpu_index(gpu.BlockIdOp))
        block_dim = self.add(fast.gpu_index(gpu.BlockDimOp))
        scaled = self.add(fast.index_op(arith.MuliOp, block_id, block_dim, flags=True))
        gid = self.add(fast.index_op(arith.AddiOp, scaled, tid, flags=True))
        ranges, start = [], 0
        for k in kernels:
            count = 1
            for size in k.domain_sizes[: k.num_parallel]:
                count *= size
            ranges.append((k, start, start + count))
            start += count
        self._chain(ranges, gid, args)
        self.add(gpu.ReturnOp.create())
        return start

    def _chain(
        self,
        ranges: list[tuple[kd.KernelOp, int, int]],
        gid: SSAValue,
        args: dict[SSAValue, SSAValue],
    ) -> None:
        """`scf.if id < end0 { k0 } else { scf.if id < end1 { k1 } ... }`."""
        (k, start, end), rest = ranges[0], ranges[1:]
        cond = self.add(fast.cmpi(gid, self.const(end), "ult"), k.location)
        then_block, else_block = Block(), Block()
        outer = self.block
        self.block = then_block
        if start == 0:
            lid = gid
        else:
            lid = self.add(fast.index_op(arith.SubiOp, gid, self.const(start), flags=True))
        point = self.delinearize(lid, k.domain_sizes[: k.num_parallel], k.location)
        self.lower_kernel_at(k, point, args)
        self.add(fast.scf_yield())
        if rest:
            self.block = else_block
            self._chain(rest, gid, args)
            self.add(fast.scf_yield())
        self.block = outer
        self.add(fast.scf_if(cond, then_block, else_block if rest else None), k.location)

    def delinearize(self, lid: SSAValue, sizes: Sequence[int], loc: Attribute) -> list[SSAValue]:
        """Row-major indices of the linear id `lid` in `sizes` (divui/remui)."""
        idx: list[SSAValue] = [self.const(0)] * len(sizes)
        rest = lid
        for k in reversed(range(len(sizes))):
            if sizes[k] == 1:
                continue
            if k == 0 or all(s == 1 for s in sizes[:k]):
                idx[k] = rest
                break
            size = self.const(sizes[k])
            idx[k] = self.add(fast.index_op(arith.RemUIOp, rest, size), loc)
            rest = self.add(fast.index_op(arith.DivUIOp, rest, size), loc)
        return idx

    # --- kernel bodies ---------------------------------------------------------------

    def lower_kernel_at(
        self, k: kd.KernelOp, point: list[SSAValue], args: dict[SSAValue, SSAValue]
    ) -> None:
        """The body of `k` at the parallel indices `point`: reduction loops, then the
        epilogue."""
        npar, sizes = k.num_parallel, k.domain_sizes
        block_args = k.body.block.args  # one index per domain dim, then the buffers
        index_args = block_args[: len(sizes)]
        vm: dict[SSAValue, SSAValue] = {a: args[a] for a in block_args[len(sizes) :]}
        vm.update(zip(index_args[:npar], point))
        prologue, reds, epilogue = k.phases()
        if reds:
            accs = [self._init(r) for r in reds]
            done = self._loops(k, sizes, prologue, reds, accs, vm, point, npar)
            vm.update((r.result, v) for r, v in zip(reds, done))
            for gone in [*index_args[npar:], *(v for op in prologue for v in op.results)]:
                vm.pop(gone, None)  # only defined inside the reduction loops
        for op in epilogue:
            self.lower_op(op, k, vm, point)

    def guarded_load(
        self, op: kd.LoadOp, vm: dict[SSAValue, SSAValue], point: list[SSAValue], loc: Attribute
    ) -> SSAValue:
        """A load that reads 0 where the guard fails: branch-free, with the indices set to 0
        there so that no thread reads out of bounds."""
        assert op.guard is not None
        inside: SSAValue | None = None
        zero = self.const(0)
        preds = {
            AffineConstraintKind.ge: "sge",
            AffineConstraintKind.le: "sle",
            AffineConstraintKind.eq: "eq",
        }
        for c in op.guard.data.constraints:
            value = self.expand(c.lhs - c.rhs, point, loc)
            holds = self.add(arith.CmpiOp(value, zero, preds[c.kind]), loc)
            inside = holds if inside is None else self.add(arith.AndIOp(inside, holds), loc)
        assert inside is not None
        idx = [
            self.add(arith.SelectOp(inside, self.expand(e, point, loc), zero), loc)
            for e in op.map.data.results
        ]
        value = self.add(fast.load(vm[op.buffer], idx), loc)
        return self.add(arith.SelectOp(inside, value, self.const(0.0, op.result.type)), loc)

    def to_index(self, value: SSAValue, loc: Attribute) -> SSAValue:
        """An index from an integer held in a float (gather/scatter indices)."""
        as_int = self.add(arith.FPToSIOp(value, i64), loc)
        return self.add(arith.IndexCastOp(as_int, INDEX), loc)

    def _init(self, r: kd.ReduceOp) -> SSAValue:
        ty = r.result.type
        if not isinstance(ty, AnyFloat):
            raise GradfuseError(
                f"kernel.reduce of {ty} is not supported (float only)", position_of(r.location)
            )
        return self.const(_INIT[r.kind.data], ty)

    def _loops(
        self,
        k: kd.KernelOp,
        sizes: tuple[int, ...],
        prologue: list[Operation],
        reds: list[kd.ReduceOp],
        accs: list[SSAValue],
        vm: dict[SSAValue, SSAValue],
        point: list[SSAValue],
        dim: int,
    ) -> list[SSAValue]:
        """One `scf.for` per reduction dim (of `k`'s domain `sizes`) from `dim` on; the
        prologue runs innermost."""
        with self.counted_loop(sizes[dim], accs, k.location) as (body, loop):
            if self.dim_names:
                body.args[0].name_hint = f"d{dim}"
            vm[k.body.block.args[dim]] = body.args[0]
            inner = [*point, body.args[0]]
            carried = list(body.args[1:])
            if dim + 1 < len(sizes):
                new = self._loops(k, sizes, prologue, reds, carried, vm, inner, dim + 1)
            else:
                for op in prologue:
                    self.lower_op(op, k, vm, inner)
                new = []
                for r, acc in zip(reds, carried):
                    value = vm[r.value]
                    new.append(self.add(combine(r.kind.data, acc, value), r.location))
            self.add(fast.scf_yield(*new))
        return list(loop.results)

    def lower_op(
        self, op: Operation, k: kd.KernelOp, vm: dict[SSAValue, SSAValue], point: list[SSAValue]
    ) -> None:
        """One body op at `point`: loads/stores through their maps, other ops cloned."""
        for operand in op.operands:
            if operand not in vm and _inside(operand, k):
                raise GradfuseError(
                    f"{op.name} in kernel {k.sym_name.data} uses a value that is not defined"
                    " where it runs (a reduction index or a prologue value after the reductions)",
                    position_of(op.location),
                )
        loc = op.location
        kind = type(op)
        if (kind is kd.LoadOp or kind is kd.StoreOp) and "guard" not in op.properties:
            operands = op.operands  # the hot path: plain loads and stores
            access = op.properties["map"].data  # type: ignore[attr-defined]
            idx = [self.expand(e, point, loc) for e in access.results]
            if kind is kd.LoadOp:
                vm[op.results[0]] = self.add(fast.load(vm[operands[0]], idx), loc)
            else:
                self.add(fast.store(vm[operands[0]], vm[operands[1]], idx), loc)
            return
        if isinstance(op, kd.LoadOp):  # a guarded load (kernel.store has no guard)
            vm[op.result] = self.guarded_load(op, vm, point, loc)
            return
        if isinstance(op, kd.GatherOp | kd.ScatterAddOp):
            symbol = self.to_index(vm[op.index], loc)
            idx = [self.expand(e, point, loc, [symbol]) for e in op.map.data.results]
            if isinstance(op, kd.GatherOp):
                vm[op.result] = self.add(fast.load(vm[op.buffer], idx), loc)
            elif op.one_slot:  # no two points add to one element: a plain read-add-write
                old = self.add(fast.load(vm[op.buffer], idx), loc)
                new = self.add(combine("add", old, vm[op.value]), loc)
                self.add(fast.store(new, vm[op.buffer], idx), loc)
            else:
                add = memref.AtomicRMWOp.create(
                    operands=[vm[op.value], vm[op.buffer], *idx],
                    result_types=[op.value.type],
                    properties={"kind": IntegerAttr(0, i64)},  # addf
                )
                self.add(add, loc)
            return
        if isinstance(op, kd.RandomOp):
            linear = self.expand(op.map.data.results[0], point, loc)
            vm[op.result] = emit_uniform(self, linear, vm[op.counter], op.seed.value.data, loc)
            return
        if isinstance(op, kd.ReduceOp) or op.regions:
            raise GradfuseError(
                f"{op.name} cannot stand here in kernel {k.sym_name.data}", position_of(loc)
            )
        copy = type(op).create(  # a clone without the generic machinery (hot path)
            operands=[vm.get(o, o) for o in op.operands],
            result_types=[r.type for r in op.results],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        copy.location = op.location
        vm.update(zip(op.results, copy.results))
        self.block.add_op(copy)


def combine(kind: str, acc: SSAValue, value: SSAValue) -> Operation:
    """One step of a `kernel.reduce` of `kind`: `arith.addf` or `arith.maximumf`."""
    cls = arith.AddfOp if kind == "add" else arith.MaximumfOp
    return cls.create(operands=[acc, value], result_types=[acc.type])


def _inside(value: SSAValue, k: kd.KernelOp) -> bool:
    """Whether `value` is defined inside the kernel `k`'s body."""
    owner = value.owner
    block = owner if isinstance(owner, Block) else owner.parent_block()
    return block is k.body.block
