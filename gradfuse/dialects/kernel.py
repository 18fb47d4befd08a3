"""The `kernel` dialect: fused kernels over buffers, with affine access maps.

`convert-tg-to-kernel` turns a tg program (its `tg.fusion`s, from `tg-fuse`) into host
code over buffers (`kernel.param`, `kernel.alloc`, `kernel.feed`, `kernel.for`, ...)
and `kernel.kernel` ops, one per launch.
A kernel iterates over its domain: the leading `parallel` dims, then the
reduction dims. Its body loads and stores through affine maps from the domain
to buffer indices and computes with `arith`/`math` on scalars. Ops before the
`kernel.reduce`s run at every point of the domain (the prologue); ops after
them run once per point of the parallel dims (the epilogue):

```
kernel.kernel "k1" contraction domain [2, 255, 255] parallel 2 (%x, %w, %h) {
^bb0(%i: index, %j: index, %k: index, %bx: memref<2x255xf32>, ...):
  %a = kernel.load %bx[affine_map<(d0, d1, d2) -> (d0, d2)>] : f32
  %b = kernel.load %bw[affine_map<(d0, d1, d2) -> (d1, d2)>] : f32
  %p = arith.mulf %a, %b : f32
  %s = kernel.reduce add %p : f32
  kernel.store %s, %bh[affine_map<(d0, d1) -> (d0, d1)>] : f32
}
```

`kernel.group` holds several independent kernels launched as one (horizontal
fusion, e.g. every optimizer update of a step); `kernel.rows` (`kernel_rows`) holds
kernels run one after another for each row, as one launch (vertical fusion by rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    AffineMapAttr,
    AffineSetAttr,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    f32,
    i64,
)
from xdsl.ir import Block, Dialect, Operation, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap, AffineSet, AffineSymExpr
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import IsolatedFromAbove, MemoryReadEffect, MemoryWriteEffect, NoTerminator, Pure

from gradfuse.dialects.tg_base import access_properties, fail, i64_array, ints

KINDS = ("elementwise", "reduction", "contraction")
REDUCTIONS = ("add", "max")


@irdl_op_definition
class KernelOp(IRDLOperation):
    """One fused kernel: a loop nest over `domain` whose body loads, computes and stores."""

    name = "kernel.kernel"
    sym_name = prop_def(StringAttr)
    kind = prop_def(StringAttr)
    domain = prop_def(DenseArrayBase)
    parallel = prop_def(IntegerAttr)
    buffers = var_operand_def(MemRefType)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), MemoryWriteEffect())

    def __init__(
        self,
        name: str,
        kind: str,
        domain: Sequence[int],
        parallel: int,
        buffers: Sequence[SSAValue],
    ):
        block = Block(arg_types=[IndexType()] * len(domain) + [b.type for b in buffers])
        super().__init__(
            operands=[buffers],
            regions=[Region(block)],
            properties={
                "sym_name": StringAttr(name),
                "kind": StringAttr(kind),
                "domain": i64_array(domain),
                "parallel": IntegerAttr(parallel, i64),
            },
        )

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        return ints(self.domain)

    @property
    def num_parallel(self) -> int:
        return self.parallel.value.data

    @property
    def index_args(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args[: len(self.domain_sizes)])

    @property
    def buffer_args(self) -> tuple[SSAValue, ...]:
        return tuple(self.body.block.args[len(self.domain_sizes) :])

    def phases(self) -> tuple[list[Operation], list[ReduceOp], list[Operation]]:
        """The body's prologue, its `kernel.reduce`s and its epilogue (all the ops when
        there is no reduce)."""
        ops = list(self.body.block.ops)
        reduces = [i for i, op in enumerate(ops) if isinstance(op, ReduceOp)]
        if not reduces:
            return [], [], ops
        first, split = reduces[0], reduces[-1] + 1
        reds = [op for op in ops[first:split] if isinstance(op, ReduceOp)]
        return ops[:first], reds, ops[split:]

    def verify_(self) -> None:
        if self.kind.data not in KINDS:
            raise fail(self, f"kind must be one of {', '.join(KINDS)}, got {self.kind.data}")
        dims = self.domain_sizes
        if not 0 <= self.num_parallel <= len(dims) or any(d < 1 for d in dims):
            raise fail(self, f"bad domain {list(dims)} with {self.num_parallel} parallel dims")
        args = self.body.block.args
        want = [IndexType()] * len(dims) + [b.type for b in self.buffers]
        if [a.type for a in args] != want:
            raise fail(self, "body arguments must be one index per domain dim, then the buffers")
        prologue, reduces, epilogue = self.phases()
        if (self.num_parallel < len(dims)) != bool(reduces):
            raise fail(self, "a kernel has kernel.reduce ops exactly when it has reduction dims")
        if len(prologue) + len(reduces) + len(epilogue) != len(self.body.block.ops):
            raise fail(self, "kernel.reduce ops must stand together between prologue and epilogue")
        before = set(prologue)
        for ops, rank in ((prologue, len(dims)), (epilogue, self.num_parallel)):
            for op in ops:
                if isinstance(op, LoadOp | StoreOp | GatherOp | ScatterAddOp | RandomOp):
                    if op.map.data.num_dims != rank:
                        raise fail(op, f"access map {op.map.data} must take {rank} dims here")
                if ops is epilogue and any(o.owner in before for o in op.operands):
                    raise fail(op, "an epilogue op may only use reductions, not prologue values")


@irdl_op_definition
class GroupOp(IRDLOperation):
    """Independent kernels launched as one (horizontal fusion).

    `kernel.group "update" { kernel.kernel ... kernel.kernel ... }`
    """

    name = "kernel.group"
    sym_name = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), MemoryWriteEffect())

    def __init__(self, name: str, kernels: Sequence[KernelOp]):
        super().__init__(
            regions=[Region(Block(kernels))], properties={"sym_name": StringAttr(name)}
        )

    def verify_(self) -> None:
        for op in self.body.block.ops:
            if not isinstance(op, KernelOp):
                raise fail(self, f"may only hold kernel.kernel ops, found {op.name}")


class _AccessOp(IRDLOperation):
    """A read or write of `buffer` through `map`; an indexed one (gather, scatter_add)
    takes the value of its `index` operand as the map's one symbol s0."""

    INDEXED: ClassVar[bool] = False

    def verify_(self) -> None:
        buffer, map = self.buffer.type, self.map.data  # type: ignore[attr-defined]
        assert isinstance(buffer, MemRefType)
        if len(map.results) != buffer.get_num_dims():
            raise fail(
                self,
                f"access map {map} gives {len(map.results)} indices"
                f" for a rank-{buffer.get_num_dims()} buffer",
            )
        if self.INDEXED and map.num_symbols != 1:
            raise fail(self, "the access map needs one symbol (s0) for the index")


@irdl_op_definition
class LoadOp(_AccessOp):
    """Reads `buffer[map(domain point)]`, or 0 where an optional `guard` fails (padding).

    `%a = kernel.load %x[affine_map<(d0, d1) -> (d1, d0)>] : f32`
    """

    name = "kernel.load"
    buffer = operand_def(MemRefType)
    map = prop_def(AffineMapAttr)
    guard = opt_prop_def(AffineSetAttr)
    result = result_def()
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$buffer `[` $map `]` attr-dict `:` type($buffer) `->` type($result)"
    irdl_options = (ParsePropInAttrDict(),)

    @classmethod
    def build_fast(cls, buffer: SSAValue, map: AffineMap, guard: AffineSet | None = None) -> LoadOp:
        """The same as the constructor, without its generic argument checks (hot path)."""
        assert isinstance(buffer.type, MemRefType)
        props = access_properties(map, guard)
        return cls.create(
            operands=[buffer], result_types=[buffer.type.element_type], properties=props
        )

    def __init__(self, buffer: SSAValue, map: AffineMap, guard: AffineSet | None = None):
        assert isinstance(buffer.type, MemRefType)
        props = access_properties(map, guard)
        super().__init__(
            operands=[buffer], result_types=[buffer.type.element_type], properties=props
        )


@irdl_op_definition
class StoreOp(_AccessOp):
    """Writes `value` to `buffer[map(parallel point)]`.

    `kernel.store %v, %h[affine_map<(d0, d1) -> (d0, d1)>] : f32`
    """

    name = "kernel.store"
    value = operand_def()
    buffer = operand_def(MemRefType)
    map = prop_def(AffineMapAttr)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $buffer `[` $map `]` attr-dict `:` type($value) `,` type($buffer)"

    def __init__(self, value: SSAValue, buffer: SSAValue, map: AffineMap):
        super().__init__(operands=[value, buffer], properties={"map": AffineMapAttr(map)})


@irdl_op_definition
class GatherOp(_AccessOp):
    """Reads `buffer[map(point)[index]]`: the map's symbol s0 is the value of `index`
    (an integer held in a float).

    `%v = kernel.gather %x[affine_map<(d0, d1)[s0] -> (s0, d1)>], %i : memref<9x4xf32> -> f32`
    """

    name = "kernel.gather"
    INDEXED: ClassVar[bool] = True
    buffer = operand_def(MemRefType)
    index = operand_def()
    map = prop_def(AffineMapAttr)
    result = result_def()
    traits = traits_def(MemoryReadEffect())
    assembly_format = (
        "$buffer `[` $map `]` `,` $index attr-dict `:` type($buffer) `,` type($index)"
        " `->` type($result)"
    )

    def __init__(self, buffer: SSAValue, map: AffineMap, index: SSAValue):
        assert isinstance(buffer.type, MemRefType)
        super().__init__(
            operands=[buffer, index],
            result_types=[buffer.type.element_type],
            properties={"map": AffineMapAttr(map)},
        )


@irdl_op_definition
class ScatterAddOp(_AccessOp):
    """Adds `value` to `buffer[map(point)[index]]`, atomically (indices may repeat).

    `kernel.scatter_add %v, %g[affine_map<(d0, d1)[s0] -> (s0, d1)>], %i : f32, memref<9x4xf32>, f32`
    """

    name = "kernel.scatter_add"
    INDEXED: ClassVar[bool] = True
    value = operand_def()
    buffer = operand_def(MemRefType)
    index = operand_def()
    map = prop_def(AffineMapAttr)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = (
        "$value `,` $buffer `[` $map `]` `,` $index attr-dict `:` type($value) `,`"
        " type($buffer) `,` type($index)"
    )

    def __init__(self, value: SSAValue, buffer: SSAValue, map: AffineMap, index: SSAValue):
        super().__init__(operands=[value, buffer, index], properties={"map": AffineMapAttr(map)})

    @property
    def one_slot(self) -> bool:
        """Whether its points add to distinct elements (no add need be atomic): the index
        is a load (a stack's slot: the step counter, or a row's copy of it) and the map
        sends each dim to a place of its own, so that points that differ write elements
        that differ, whatever their indices."""
        load = self.index.owner
        if not isinstance(load, LoadOp) or load.guard is not None:
            return False
        map = self.map.data
        dims = [e for e in map.results if not isinstance(e, AffineSymExpr)]
        distinct = {e.position for e in dims if isinstance(e, AffineDimExpr)}
        return len(distinct) == len(dims) == map.num_dims


@irdl_op_definition
class RandomOp(IRDLOperation):
    """Uniform [0, 1) f32 from Philox2x32-10 (`gradfuse.philox`) at counter
    (linear index `map(point)`, `counter`) under key `seed`.

    `%u = kernel.random %c[affine_map<(d0, d1) -> (d0 * 16 + d1)>] seed 7 : f32 -> f32`
    """

    name = "kernel.random"
    counter = operand_def()
    map = prop_def(AffineMapAttr)
    seed = prop_def(IntegerAttr)
    result = result_def()
    traits = traits_def(Pure())
    assembly_format = (
        "$counter `[` $map `]` `seed` $seed attr-dict `:` type($counter) `->` type($result)"
    )

    def __init__(self, counter: SSAValue, map: AffineMap, seed: int):
        super().__init__(
            operands=[counter],
            result_types=[f32],
            properties={"map": AffineMapAttr(map), "seed": IntegerAttr(seed, i64)},
        )

    def verify_(self) -> None:
        if len(self.map.data.results) != 1:
            raise fail(self, "the map gives the one linear element index")


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """Combines `value` over the reduction dims (`add` or `max`).

    `%s = kernel.reduce "add" %p : f32`
    """

    name = "kernel.reduce"
    T: ClassVar = VarConstraint("T", AnyAttr())
    kind = prop_def(StringAttr)
    value = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$kind $value attr-dict `:` type($result)"

    def __init__(self, kind: str, value: SSAValue):
        super().__init__(
            operands=[value], result_types=[value.type], properties={"kind": StringAttr(kind)}
        )

    def verify_(self) -> None:
        if self.kind.data not in REDUCTIONS:
            raise fail(self, f"kind must be add or max, got {self.kind.data}")


from gradfuse.dialects.kernel_host import (  # noqa: E402
    AllocOp,
    AllReduceOp,
    ConstantOp,
    FeedOp,
    ForOp,
    ParamOp,
    ReceiveOp,
    YieldOp,
)
from gradfuse.dialects.kernel_rows import RowsOp  # noqa: E402

LAUNCH_GROUPS = (GroupOp, RowsOp)
"""Ops that hold several kernels launched as one."""

KERNEL = Dialect(
    "kernel",
    [
        KernelOp, GroupOp, RowsOp,  # launches
        LoadOp, StoreOp, GatherOp, ScatterAddOp, RandomOp, ReduceOp,  # kernel bodies
        ParamOp, AllocOp, ConstantOp, FeedOp, ReceiveOp, AllReduceOp, ForOp, YieldOp,  # host
    ],
    [],
)  # fmt: skip
