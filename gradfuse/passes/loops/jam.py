"""Unroll-and-jam of one dim of an `scf.parallel` nest (`loops-unroll-jam`).

The nest's dim `d` steps by `factor` times its step, and its body holds `factor` copies
of each op, one per point `d + k * step`, side by side: the copies of a reduction
`scf.for` become one loop carrying all their sums (independent chains of adds, as
many accumulators as a register block has), and what does not depend on `d` (a read
of the other operand, a broadcast, a constant) is computed once for all the copies.
The last `N mod factor` points stay in the original nest. MLIR's
`affine-loop-unroll-jam` on a parallel dim:

```
scf.parallel (%d0, %d1) = (%c0, %c0) to (%c64, %c128) step (%c1, %c8) {
  %s = scf.for %d2 = ... iter_args(%acc = %z) -> (vector<8xf32>) {
    %a = vector.load %g[%d2, %d1] ...
    %b = memref.load %x[%d2, %d0] ...
// with d0 jammed by 2 becomes
scf.parallel (%d0, %d1) = (%c0, %c0) to (%c64, %c128) step (%c2, %c8) {
  %d0_1 = arith.addi %d0, %c1 : index
  %s:2 = scf.for %d2 = ... iter_args(%acc = %z, %acc_1 = %z) -> (vector<8xf32>, vector<8xf32>) {
    %a = vector.load %g[%d2, %d1] ...          // once: it does not depend on d0
    %b = memref.load %x[%d2, %d0] ...
    %b_1 = memref.load %x[%d2, %d0_1] ...
```

The points of an `scf.parallel` are independent, so running them side by side is
exact: every point does the same operations in the same order as before.
"""

from __future__ import annotations

from xdsl.dialects import arith, math, memref, scf, vector
from xdsl.ir import Block, Operation, Region, SSAValue

from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import block_like, dim_trips, int_constant, peel

READS = (memref.LoadOp, vector.LoadOp, vector.TransferReadOp)
"""Ops that read memory without writing it: computed once where they do not vary (the
points of a nest never write what another point reads)."""


def shareable(op: Operation) -> bool:
    """Whether one copy of `op` can serve every point where its operands are the same: a
    read, or an op without memory effects (arith, math, a broadcast)."""
    return not op.regions and (
        isinstance(op, (*READS, vector.BroadcastOp))
        or type(op).__module__ in (arith.__name__, math.__name__)
    )


class Jam:
    """Clones a nest body `factor` times side by side (see the module docstring)."""

    def __init__(self, factor: int):
        self.factor = factor
        self.vms: list[dict[SSAValue, SSAValue]] = [{} for _ in range(factor)]
        self.varying: set[SSAValue] = set()  # old values that differ between the copies

    def get(self, v: SSAValue, k: int) -> SSAValue:
        return self.vms[k].get(v, v)

    def uses_varying(self, op: Operation) -> bool:
        return any(v in self.varying for o in op.walk() for v in o.operands)

    def block(self, ops: list[Operation], into: Block) -> None:
        for op in ops:
            self.op(op, into)

    def op(self, op: Operation, into: Block) -> None:
        varying = self.uses_varying(op)
        if not varying and shareable(op):
            new = fast.clone(op, self.vms[0])
            into.add_op(new)
            for vm in self.vms:
                vm.update(zip(op.results, new.results))
            return
        if varying and isinstance(op, scf.ForOp):
            self.loop(op, into)
            return
        for vm in self.vms:
            new = fast.clone(op, vm)
            into.add_op(new)
            vm.update(zip(op.results, new.results))
        if varying:
            self.varying.update(op.results)

    def loop(self, op: scf.ForOp, into: Block) -> None:
        """One `scf.for` for the copies of `op`, carrying the values of every copy."""
        body = op.body.block
        n = len(op.iter_args)
        arg_types = [a.type for a in body.args[1:]] * self.factor
        new_body = Block(arg_types=[body.args[0].type, *arg_types])
        iv = new_body.args[0]
        iv.name_hint = body.args[0].name_hint
        for k, vm in enumerate(self.vms):
            vm[body.args[0]] = iv
            vm.update(zip(body.args[1:], new_body.args[1 + k * n : 1 + (k + 1) * n]))
        self.varying.update(body.args[1:])
        self.block([o for o in body.ops if o is not body.last_op], new_body)
        y = body.last_op
        assert isinstance(y, scf.YieldOp)
        new_body.add_op(
            scf.YieldOp(*[self.get(v, k) for k in range(self.factor) for v in y.operands])
        )
        inits = [self.get(v, k) for k in range(self.factor) for v in op.iter_args]
        new = scf.ForOp(
            self.get(op.lb, 0), self.get(op.ub, 0), self.get(op.step, 0), inits, Region(new_body)
        )
        new.attributes.update(op.attributes)
        into.add_op(new)
        for k, vm in enumerate(self.vms):
            vm.update(zip(op.results, new.results[k * n : (k + 1) * n]))
        self.varying.update(op.results)


def unroll_jam(nest: scf.ParallelOp, dim: int, factor: int) -> scf.ParallelOp | None:
    """Jams dim `dim` of `nest` by `factor` (constant bounds, at least `factor` steps)
    into a new nest before it, the remainder left in `nest` (erased where there is none);
    the new nest, or None (nothing changed) where it cannot."""
    trips = dim_trips(nest, dim)
    if trips < factor or factor < 2:
        return None
    step = int_constant(nest.step[dim])
    assert step is not None
    body = nest.body.block
    new_body = block_like(body.args)
    jam = Jam(factor)
    for vm in jam.vms:
        vm.update(zip(body.args, new_body.args))
    d = body.args[dim]
    jam.varying.add(d)
    for k in range(1, factor):
        offset = fast.constant(k * step)
        moved = fast.index_op(arith.AddiOp, new_body.args[dim], offset.result)
        new_body.add_ops([offset, moved])
        jam.vms[k][d] = moved.results[0]
    jam.block([o for o in body.ops if not isinstance(o, scf.ReduceOp)], new_body)
    new_body.add_op(scf.ReduceOp())
    return peel(nest, dim, (trips - trips % factor) * step, step * factor, new_body)
