"""Strip-mining a nest's innermost dim into `vector<Wxf32>` lanes (`loops-vectorize`).

Where a nest's innermost dim `d` runs through a reduction (a weight gradient, x @ w),
gcc does not vectorise the outer loop of the two; in lanes it is explicit: `d` steps by
W, every value that depends on `d` becomes a vector of W lanes (the sums carried by
the reduction loop too), reads and writes contiguous along `d`
become `vector.load`/`vector.store`, values the same for every lane are broadcast
where a vector op uses them. The last `N mod W` points run in a scalar copy of the
nest. A read or a write once a point (outside the nest's loops) whose index moves
across the lanes is a `vector.transfer_read`/`transfer_write` where the lanes step one
element along one dim of the buffer (an NCHW output, the lanes along its channels),
else one scalar access a lane; in a loop, only a write of the first kind, its lanes
less than a page apart (`Widen.near_transfer`). MLIR's `vector` dialect, as its affine
super-vectorizer makes:

```
scf.parallel (%d0, %d1) = (%c0, %c0) to (%c64, %c128) step (%c1, %c8) {
  %s = scf.for %d2 = %c0 to %c32 step %c1 iter_args(%acc = %zeros) -> (vector<8xf32>) {
    %a = vector.load %g[%d2, %d1] : memref<32x128xf32>, vector<8xf32>
    %b = memref.load %x[%d2, %d0] : memref<32x64xf32>
    %bb = vector.broadcast %b : f32 to vector<8xf32>
    %p = arith.mulf %a, %bb : vector<8xf32>
    ...
  }
  vector.transfer_write %s, %y[%d1, %d0] {in_bounds = [true],
      permutation_map = affine_map<(d0, d1) -> (d0)>} : vector<8xf32>, memref<128x64xf32>
```
"""

from __future__ import annotations

from math import prod

from xdsl.dialects import arith, math, memref, scf, vector
from xdsl.dialects.builtin import (
    AffineMapAttr,
    ArrayAttr,
    BoolAttr,
    Float32Type,
    IndexType,
    IntegerType,
    VectorType,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap

from gradfuse.dialects import lanes
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.loops.loop_ir import block_like, dependents, int_constant, peel
from gradfuse.passes.loops.loops_transpose_writes import tiled_loop

PAGE_FLOATS = 1024
"""Floats in a 4 KB page: lanes stored this far apart or further share one set of an L1
cache (its sets are indexed by the address bits under 4 KB on x86-64 cores)."""
WIDTHS = (16, 8)
"""Lanes per vector that the C target declares types for, widest first: 16 floats (one
AVX-512 register) and 8 (one AVX2 register)."""
DEFAULT_LANES = 8
"""The default widest vector (`loops-vectorize{lanes=16}` sets it): 8 floats. The c
backend measures its machine (`gradfuse.backend.c.lanes`): on the 2-core Zen 4 developer
machine (AVX-512 as two 256-bit halves), 16 lanes ran the transformer's update group in
519 us against 368 us; on a 2-core Sapphire Rapids one (two 512-bit FMA units), 16
lanes ran DCGAN b8's step in 213 ms against 252 ms (one thread, gcc 12)."""


def widths(widest: int) -> tuple[int, ...]:
    """The vector widths to use, widest first, up to `widest` lanes: (16, 8) for 16."""
    return tuple(w for w in WIDTHS if w <= widest)


FLOAT_OPS = (
    arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp, arith.MaximumfOp, arith.NegfOp,
)  # fmt: skip
MASK_OPS: dict[type[Operation], type[Operation]] = {
    arith.CmpfOp: lanes.CmpfOp,
    arith.SelectOp: lanes.SelectOp,
}
"""Ops whose lanes are ops of the `lanes` dialect (masks: xDSL's take only a scalar i1)."""
IN_BOUNDS = ArrayAttr([BoolAttr.from_bool(True)])
"""A transfer's lanes are all in the buffer: each is a point of the nest."""


class NotLanes(Exception):
    """The nest has an op that lanes cannot express here."""


class Widen:
    """Clones a nest body with `d` stepping by `width`, varying values as vectors."""

    def __init__(self, d: SSAValue, width: int, dependent: set[SSAValue]):
        self.d, self.width = d, width
        self.dependent = dependent  # the old values computed from `d` (`dependents`)
        self.vm: dict[SSAValue, SSAValue] = {}
        self.varying: set[SSAValue] = set()  # new values that are vectors
        self.starts: set[SSAValue] = {d}  # old values `d + i`, `i` the same in every lane
        self.deferred: set[SSAValue] = set()  # old index values that differ by lane
        self.outer = True  # at the nest's level, not in a loop: gathers and scatters
        self.lane_values: dict[tuple[SSAValue, int], SSAValue] = {}

    def depends(self, v: SSAValue) -> bool:
        """Whether old value `v` is computed from `d`."""
        return v in self.dependent

    def vec(self, ty: object) -> VectorType:
        """`ty`'s lanes: `vector<Wxf32>`, or a mask `vector<Wxi1>`."""
        if not isinstance(ty, Float32Type) and ty != IntegerType(1):
            raise NotLanes(f"a lane value of type {ty}")
        return lanes.vector_type(ty, self.width)

    def get(self, v: SSAValue) -> SSAValue:
        return self.vm.get(v, v)

    def as_vector(self, v: SSAValue, block: Block) -> SSAValue:
        """`v` (mapped) as a vector: itself, or broadcast from its scalar."""
        new = self.get(v)
        if new in self.varying:
            return new
        op = vector.BroadcastOp(new, self.vec(new.type))
        block.add_op(op)
        return op.vector

    def contiguous(self, indices: list[SSAValue]) -> bool | None:
        """True: the last index is `d` and no other depends on it; False: none does;
        None: something else (not lanes)."""
        if not any(self.depends(i) for i in indices):
            return False
        if indices[-1] in self.starts and not any(self.depends(i) for i in indices[:-1]):
            return True
        return None

    def offset(self, op: arith.AddiOp) -> bool:
        """Whether `op` adds to a lane start a value the same in every lane."""
        a, b = op.lhs, op.rhs
        return (a in self.starts and not self.depends(b)) or (
            b in self.starts and not self.depends(a)
        )

    def block(self, ops: list[Operation], into: Block) -> None:
        for op in ops:
            self.op(op, into)

    def lane_value(self, v: SSAValue, lane: int, into: Block) -> SSAValue:
        """The scalar that old index value `v` has in lane `lane` (its ops cloned with
        `d + lane` for `d`)."""
        if not self.depends(v):
            return self.get(v)
        key = (v, lane)
        if key not in self.lane_values:
            if v is self.d and lane == 0:
                self.lane_values[key] = self.get(v)
            elif v is self.d:
                offset = fast.constant(lane)
                moved = fast.index_op(arith.AddiOp, self.get(v), offset.result)
                into.add_ops([offset, moved])
                self.lane_values[key] = moved.results[0]
            else:
                op = v.owner
                assert isinstance(op, Operation)
                vm = {o: self.lane_value(o, lane, into) for o in op.operands}
                new = fast.clone(op, vm)
                into.add_op(new)
                self.lane_values.update(((r, lane), n) for r, n in zip(op.results, new.results))
        return self.lane_values[key]

    def lane_step(self, v: SSAValue) -> int | None:
        """How much old index value `v` grows from one lane to the next (`d` by 1, `d *
        16 + k` by 16), through `addi`, `subi` and `muli` by a constant; None where not
        by a constant."""
        if not self.depends(v):
            return 0
        if v is self.d:
            return 1
        op = v.owner
        if isinstance(op, arith.AddiOp | arith.SubiOp):
            a, b = self.lane_step(op.lhs), self.lane_step(op.rhs)
            if a is None or b is None:
                return None
            return a + b if isinstance(op, arith.AddiOp) else a - b
        if isinstance(op, arith.MuliOp):
            for x, k in ((op.lhs, int_constant(op.rhs)), (op.rhs, int_constant(op.lhs))):
                step = self.lane_step(x) if k is not None else None
                if step is not None and k is not None:
                    return step * k
        return None

    def lane_dim(self, access: memref.LoadOp | memref.StoreOp) -> int | None:
        """The dim of its buffer that `access`'s lanes run along, one element apart (the
        others the same in every lane); None where there is no such dim."""
        steps = [self.lane_step(i) for i in access.indices]
        if steps.count(1) != 1 or any(s not in (0, 1) for s in steps):
            return None
        return steps.index(1)

    def near_transfer(self, access: memref.StoreOp) -> bool:
        """Whether a write in a loop may store its lanes one at a time: along one dim of
        the buffer, less than `PAGE_FLOATS` apart (further, every lane's store falls in
        one L1 set: ResNet-18 b8's batch norm, 1.08 -> 1.73 ms), or along the loop's
        index, which `loops-transpose-writes` unrolls into tiles (`tiled_loop`)."""
        dim = self.lane_dim(access)
        shape = access.memref.type.get_shape()  # type: ignore[attr-defined]
        return dim is not None and (
            prod(shape[dim + 1 :]) < PAGE_FLOATS or tiled_loop(access) is not None
        )

    def transfer(
        self, access: memref.LoadOp | memref.StoreOp, into: Block
    ) -> tuple[AffineMapAttr, list[SSAValue]] | None:
        """Where `access`'s lanes run along one dim of its buffer, one element apart (the
        channels of an NCHW output): that dim as a transfer's permutation map
        (`(d0, d1, d2, d3) -> (d1)`) and lane 0's indices; else None."""
        dim = self.lane_dim(access)
        if dim is None:
            return None
        along = AffineMap(len(access.indices), 0, (AffineExpr.dimension(dim),))
        return AffineMapAttr(along), [self.lane_value(i, 0, into) for i in access.indices]

    def gather(self, op: memref.LoadOp, into: Block) -> None:
        """A read at an index that differs by lane: a `vector.transfer_read` along the
        dim the lanes run along, else one scalar read a lane, inserted."""
        lanes_type = self.vec(op.res.type)  # (f32 or i1: else not lanes)
        transfer = self.transfer(op, into)
        if transfer is not None:
            along, idx = transfer
            pad = fast.constant(0.0 if isinstance(op.res.type, Float32Type) else 0, op.res.type)
            read = vector.TransferReadOp(
                self.get(op.memref), idx, pad, lanes_type, IN_BOUNDS, along
            )
            into.add_ops([pad, read])
            self.vm[op.res] = read.result
            self.varying.add(read.result)
            return
        vec: SSAValue | None = None
        for lane in range(self.width):
            idx = [self.lane_value(i, lane, into) for i in op.indices]
            read = fast.load(self.get(op.memref), idx)
            into.add_op(read)
            if vec is None:
                first = vector.BroadcastOp(read.results[0], lanes_type)
                into.add_op(first)
                vec = first.vector
            else:
                put = vector.InsertOp(read.results[0], vec, [lane])
                into.add_op(put)
                vec = put.result
        assert vec is not None
        self.vm[op.res] = vec
        self.varying.add(vec)

    def scatter(self, op: memref.StoreOp, into: Block) -> None:
        """A write at an index that differs by lane: a `vector.transfer_write` along
        the dim the lanes run along, else one scalar write a lane."""
        value = self.as_vector(op.value, into)
        transfer = self.transfer(op, into)
        if transfer is not None:
            along, idx = transfer
            into.add_op(
                vector.TransferWriteOp(value, self.get(op.memref), idx, IN_BOUNDS, None, along)
            )
            return
        for lane in range(self.width):
            idx = [self.lane_value(i, lane, into) for i in op.indices]
            part = vector.ExtractOp(value, [lane], op.value.type)
            into.add_ops([part, fast.store(part.result, self.get(op.memref), idx)])

    def op(self, op: Operation, into: Block) -> None:  # noqa: C901 (one case per op)
        operands = [self.get(v) for v in op.operands]
        varying = any(v in self.varying for v in operands)
        if self.defer(op, varying):
            return
        if isinstance(op, memref.LoadOp):
            kind = self.contiguous(list(op.indices))
            if kind is None and self.outer:
                self.gather(op, into)
                return
            if kind is None:
                raise NotLanes("a read that is neither contiguous nor the same in every lane")
            if kind:
                new = vector.LoadOp(operands[0], operands[1:], self.vec(op.res.type))
                into.add_op(new)
                self.vm[op.res] = new.result
                self.varying.add(new.result)
                return
        elif isinstance(op, memref.StoreOp):
            kind = self.contiguous(list(op.indices))
            if kind is None and (self.outer or self.near_transfer(op)):
                self.scatter(op, into)
                return
            if not kind:
                raise NotLanes("a write that is not contiguous along the lanes")
            value = self.as_vector(op.value, into)
            into.add_op(vector.StoreOp(value, operands[1], operands[2:]))
            return
        elif isinstance(op, scf.ForOp):
            self.loop(op, into)
            return
        elif isinstance(op, scf.YieldOp | scf.ReduceOp):
            raise NotLanes("a terminator out of place")
        elif op.regions or isinstance(op, memref.AtomicRMWOp):
            raise NotLanes(f"{op.name} in lanes")
        elif varying:
            # a select on a test the same in every lane picks whole vectors: no mask
            whole = isinstance(op, arith.SelectOp) and operands[0] not in self.varying
            lane_op = arith.SelectOp if whole else MASK_OPS.get(type(op))
            if lane_op is None:
                if not isinstance(op, FLOAT_OPS) and type(op).__module__ != math.__name__:
                    raise NotLanes(f"{op.name} on lane values")
                lane_op = type(op)
            kept = operands[:1] if whole else []  # (the test, a scalar)
            args = kept + [self.as_vector(v, into) for v in op.operands[len(kept) :]]
            new = lane_op.create(
                operands=args,
                result_types=[self.vec(r.type) for r in op.results],
                properties=dict(op.properties),
                attributes=dict(op.attributes),
            )
            into.add_op(new)
            self.vm.update(zip(op.results, new.results))
            self.varying.update(new.results)
            return
        elif isinstance(op, arith.AddiOp) and self.offset(op):
            self.starts.add(op.result)  # (the lanes' first index: a scalar)
        elif any(self.depends(v) for v in op.operands):
            raise NotLanes(f"{op.name} of the lane index")
        new = fast.clone(op, self.vm)
        into.add_op(new)
        self.vm.update(zip(op.results, new.results))

    def defer(self, op: Operation, varying: bool) -> bool:
        """Whether `op` computes an index (or a condition on indices) that differs by
        lane, at the nest's level: left to `lane_value`, for a gather or a scatter; a
        NotLanes where another op uses such a value."""
        integral = (
            type(op).__module__ == arith.__name__
            and not varying
            and all(isinstance(v.type, IndexType) or v.type == IntegerType(1)
                    for v in (*op.operands, *op.results))
        )  # fmt: skip
        if not any(v in self.deferred for v in op.operands):
            lane_index = integral and any(self.depends(v) for v in op.operands)
            if lane_index and self.outer and not (isinstance(op, arith.AddiOp) and self.offset(op)):
                self.deferred.update(op.results)
                return True
            return False
        if isinstance(op, memref.LoadOp) or (
            isinstance(op, memref.StoreOp) and op.value not in self.deferred
        ):
            return False  # deferred indices: a gather or a scatter
        if integral:
            self.deferred.update(op.results)
            return True
        raise NotLanes(f"{op.name} of an index that differs by lane")

    def loop(self, op: scf.ForOp, into: Block) -> None:
        """An `scf.for`: its carried values vectors where its body makes them vary (found
        by widening the body once per newly varying value)."""
        body = op.body.block
        lanes: set[int] = {k for k, v in enumerate(op.iter_args) if self.get(v) in self.varying}
        while True:
            trial = Widen(self.d, self.width, self.dependent)
            trial.vm, trial.varying = dict(self.vm), set(self.varying)
            trial.starts = set(self.starts)
            trial.deferred, trial.outer = set(self.deferred), False
            trial.lane_values = dict(self.lane_values)  # (a lane's index in this body: its own)
            new_body = Block(arg_types=[body.args[0].type, *[
                self.vec(a.type) if k in lanes else a.type for k, a in enumerate(body.args[1:])
            ]])  # fmt: skip
            new_body.args[0].name_hint = body.args[0].name_hint
            trial.vm.update(zip(body.args, new_body.args))
            trial.varying.update(a for k, a in enumerate(new_body.args[1:]) if k in lanes)
            try:
                trial.block([o for o in body.ops if o is not body.last_op], new_body)
            except NotLanes:
                new_body.erase(safe_erase=False)
                raise
            y = body.last_op
            assert isinstance(y, scf.YieldOp)
            more = {k for k, v in enumerate(y.operands) if trial.get(v) in trial.varying}
            if more <= lanes:
                break
            new_body.erase(safe_erase=False)  # (the trial's ops use values outside it)
            lanes |= more
        outs = [trial.as_vector(v, new_body) if k in lanes else trial.get(v)
                for k, v in enumerate(y.operands)]  # fmt: skip
        new_body.add_op(scf.YieldOp(*outs))
        inits = [self.as_vector(v, into) if k in lanes else self.get(v)
                 for k, v in enumerate(op.iter_args)]  # fmt: skip
        new = scf.ForOp(self.get(op.lb), self.get(op.ub), self.get(op.step), inits,
                        Region(new_body))  # fmt: skip
        new.attributes.update(op.attributes)
        into.add_op(new)
        self.vm.update(zip(op.results, new.results))
        self.varying.update(r for k, r in enumerate(new.results) if k in lanes)


def strip_mine(nest: scf.ParallelOp, widest: int = DEFAULT_LANES) -> bool:
    """Rewrites `nest` (innermost dim from 0, step 1, at least 8 points) into lanes, the
    widest vectors up to `widest` lanes that its points fill, and a scalar remainder
    nest; False (nothing changed) where it cannot."""
    n, lo, step = (int_constant(v[-1]) for v in (nest.upperBound, nest.lowerBound, nest.step))
    usable = widths(widest)
    if n is None or lo != 0 or step != 1 or n < usable[-1]:
        return False
    width = next(w for w in usable if n >= w)
    body = nest.body.block
    d = body.args[-1]
    new_body = block_like(body.args)
    widen = Widen(d, width, dependents(d, nest))
    widen.vm.update(zip(body.args, new_body.args))
    try:
        widen.block([o for o in body.ops if not isinstance(o, scf.ReduceOp)], new_body)
    except NotLanes:
        new_body.erase(safe_erase=False)
        return False
    new_body.add_op(scf.ReduceOp())
    peel(nest, len(body.args) - 1, n - n % width, width, new_body)
    return True
