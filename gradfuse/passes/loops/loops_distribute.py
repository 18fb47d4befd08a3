"""`loops-distribute`: a row-by-row nest whose phases share a weight runs phase by phase.

A `kernel.rows` becomes one `scf.parallel` over its rows with each phase inside
(`convert-kernel-to-loops`): a row's phases run one after another while its values are
in cache. Where a phase sums a weight that the rows along some row dim all read (every
row: a transformer's linear layers on one token, an LSTM step's `h @ W_hh`; the rows of
one output channel: a convolution over rows [b, co, oh]), each row reads the weight
again and the sums of different rows cannot share a read. Distributed (loop fission, as
MLIR's affine loop fusion undoes it and TVM's `compute_at` chooses), each phase is a
nest over all rows, merged with the phase's own `scf.parallel` into one nest
(MLIR's `scf.parallel` canonicalization merges nested parallel loops the same way), so
that `loops-unroll-jam` can block rows and outputs together. The rows are independent,
so only the order of the points changes. Cuts go only where nothing but index
arithmetic of the row crosses them (recomputed in each nest that uses it):

```
scf.parallel (%d0) = (%c0) to (%c32) step (%c1) {
  scf.parallel (%d1) = (%c0) to (%c64) step (%c1) { ... x[d0, k] * w[d1, k] ... }
  %m = scf.for ... { ... }  // the row's mean
  memref.store %m, %mean[%d0]
}
// becomes
scf.parallel (%d0, %d1) = (%c0, %c0) to (%c32, %c64) step (%c1, %c1) { ... }
scf.parallel (%d0) = (%c0) to (%c32) step (%c1) { %m = scf.for ...; memref.store ... }
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gradfuse.passes.loops.loop_ir import block_like, depends, kernel_functions


def _index_math(op: Operation) -> bool:
    return type(op).__module__ == arith.__name__ and not op.regions


class Distribution:
    """The phases of one row nest (`phases`) and how to rebuild each as a nest."""

    def __init__(self, nest: scf.ParallelOp):
        self.nest = nest
        self.body = nest.body.block
        self.ops = [o for o in self.body.ops if not isinstance(o, scf.ReduceOp)]
        self.remat: set[Operation] = set()
        for op in self.ops:  # index arithmetic of the rows and of values from outside
            if _index_math(op) and all(self.outside(v) or v.owner in self.remat
                                       for v in op.operands):  # fmt: skip
                self.remat.add(op)

    def outside(self, v: SSAValue) -> bool:
        """Whether `v` is defined outside the row body's ops (a row index, a constant)."""
        return not (isinstance(v.owner, Operation) and v.owner.parent_block() is self.body)

    def phases(self) -> list[list[Operation]]:
        """The body's ops cut wherever only recomputable values cross; groups of only
        index arithmetic left out (recomputed where used)."""
        position = {op: i for i, op in enumerate(self.ops)}
        # for each op, the first op whose value (not recomputable) it or a later op uses
        first_used = [len(self.ops)] * (len(self.ops) + 1)
        for i in reversed(range(len(self.ops))):
            used = [
                position[v.owner]
                for o in self.ops[i].walk()
                for v in o.operands
                if v.owner in position and v.owner not in self.remat
            ]
            first_used[i] = min([first_used[i + 1], *used])
        groups: list[list[Operation]] = [[]]
        for i, op in enumerate(self.ops):
            if groups[-1] and first_used[i] >= i:  # nothing before i is used from i on
                groups.append([])
            groups[-1].append(op)
        return [g for g in groups if not all(o in self.remat for o in g)]

    def needed(self, group: list[Operation]) -> list[Operation]:
        """The index arithmetic from other groups that `group` uses, in body order."""
        inside = set(group)
        want: set[Operation] = set()
        work = [v for op in group for o in op.walk() for v in o.operands]
        while work:
            owner = work.pop().owner
            if owner in self.remat and owner not in inside and owner not in want:
                want.add(owner)
                work.extend(owner.operands)
        return [o for o in self.ops if o in want]

    def rebuild(self, group: list[Operation]) -> scf.ParallelOp:
        """A nest over the rows running `group`, merged with its one `scf.parallel`."""
        inner = [o for o in group if o not in self.remat]
        args = self.body.args
        merge = (
            len(inner) == 1
            and isinstance(inner[0], scf.ParallelOp)
            and all(self.outside(v) and v not in args for v in inner[0].operands)
        )  # (bounds from outside the rows, not the rows' indices)
        dims = list(args) + (list(inner[0].body.block.args) if merge else [])
        block = block_like(dims)
        vm: dict[SSAValue, SSAValue] = dict(zip(dims, block.args))
        ops = self.needed(group) + (
            [o for o in group if o in self.remat]
            + [o for o in inner[0].body.block.ops if not isinstance(o, scf.ReduceOp)]
            if merge
            else group
        )
        for op in ops:
            block.add_op(op.clone(value_mapper=vm))
        block.add_op(scf.ReduceOp())
        n = self.nest
        lo, hi, st = list(n.lowerBound), list(n.upperBound), list(n.step)
        if merge:
            p = inner[0]
            lo, hi, st = lo + list(p.lowerBound), hi + list(p.upperBound), st + list(p.step)
        new = scf.ParallelOp(lo, hi, st, Region(block))
        new.attributes.update(n.attributes)
        return new


def shares_a_weight(nest: scf.ParallelOp) -> bool:
    """Whether a reduction under `nest` reads memory at indices that some row index does
    not change (the rows along it read the same: every row, a linear layer's weight;
    the rows of one output channel, a convolution's)."""
    rows = nest.body.block.args
    for loop in nest.walk():
        if isinstance(loop, scf.ForOp) and loop.iter_args:
            for o in loop.body.walk():
                if isinstance(o, memref.LoadOp) and not all(
                    any(depends(i, r) for i in o.indices) for r in rows
                ):
                    return True
    return False


def distribute(nest: scf.ParallelOp) -> bool:
    """Distributes the row nest `nest` over its phases; whether it did."""
    if not shares_a_weight(nest):
        return False
    d = Distribution(nest)
    groups = d.phases()
    if len(groups) < 2:
        return False
    parent = nest.parent_block()
    assert parent is not None
    parent.insert_ops_before([d.rebuild(g) for g in groups], nest)
    nest.detach()
    nest.erase()
    return True


@dataclass(frozen=True)
class LoopsDistributePass(ModulePass):
    """Runs the row nests whose phases read a shared weight phase by phase.

    `ir-opt k.mlir -p loops-distribute`
    """

    name = "loops-distribute"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in kernel_functions(op):
            for nest in list(fn.body.block.ops):
                if isinstance(nest, scf.ParallelOp) and any(
                    isinstance(o, scf.ParallelOp) for o in nest.body.walk()
                ):
                    distribute(nest)
