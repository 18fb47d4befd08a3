"""Kernel bodies for `convert-tg-to-kernel`: one fused group's members as scalar ops over loads and
stores through access maps.

`KernelBody(fuser, group, host).member(m)` for each member, then `.finish(name, root)`:

    %a = tg.add %x, %b2 : tensor<2x4xf32>     // b2 = tg.view %b (d0, d1) -> (d1)
    // becomes, in the kernel body over domain [2, 4]:
    %0 = kernel.load %x[affine_map<(d0, d1) -> (d0, d1)>] : f32
    %1 = kernel.load %b[affine_map<(d0, d1) -> (d1)>] : f32
    %2 = arith.addf %0, %1 : f32
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    AffineMapAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    StringAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import FLOAT_TYPES, i64_array, ints, shape_of
from gradfuse.dialects.tg_elementwise import SEMANTICS
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.lib.fusion_graph import Group, Member, is_splat, look_through, resolve

if TYPE_CHECKING:
    from gradfuse.passes.kernel.convert_tg_to_kernel import _FunctionFuser


class KernelBody:
    """Builds one kernel body: scalar ops, loads and stores through access maps."""

    def __init__(self, fuser: _FunctionFuser, g: Group, host: Block):
        self.fuser, self.g, self.host = fuser, g, host
        self.block = Block(arg_types=[fast.INDEX] * len(g.domain))
        self.outer: list[SSAValue] = []
        self.scalars: dict[SSAValue, SSAValue] = {}
        self.loads: dict[tuple[int, str], SSAValue] = {}
        self.constants: dict[tuple[float, Attribute], SSAValue] = {}

    def add(self, op: Operation, like: Operation | None = None) -> SSAValue:
        if like is not None:
            op.location = like.location
        if isinstance(op, K.ReduceOp):  # the epilogue may not use the prologue's constants
            self.constants.clear()
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def arg(self, buffer: SSAValue) -> SSAValue:
        if buffer not in self.outer:
            self.outer.append(buffer)
            self.block.insert_arg(buffer.type, len(self.block.args))
        return self.block.args[len(self.g.domain) + self.outer.index(buffer)]

    def operand(self, value: SSAValue, map: AffineMap, prologue: bool) -> SSAValue:
        base, vmap, guard = look_through(value)
        if base in self.scalars:
            return self.scalars[base]
        if is_splat(base) and guard is None:
            owner = base.owner
            assert isinstance(owner, tg.ConstantOp) and isinstance(owner.value, FloatAttr)
            return self.constant(owner.value.value.data, base.type.element_type)  # type: ignore[attr-defined]
        sizes = self.g.domain if prologue else self.g.domain[: self.g.parallel]
        access = affine.simplify(vmap.compose(map), sizes)
        if guard is not None:
            guard = affine.simplify_guard(affine.compose_guard(guard, map), sizes)
        buffer = self.fuser.buffers[base]
        key = (id(buffer), f"{prologue}{access}{guard}")
        if key not in self.loads:
            like = base.owner if isinstance(base.owner, Operation) else None
            self.loads[key] = self.add(K.LoadOp.build_fast(self.arg(buffer), access, guard), like)
        return self.loads[key]

    def constant(self, value: float, element: Attribute) -> SSAValue:
        key = (value, element)
        if key not in self.constants:
            self.constants[key] = self.add(fast.constant(value, element))
        return self.constants[key]

    def member(self, m: Member) -> None:
        op = m.op
        if m.fill:
            zero = self.constant(0.0, op.results[0].type.element_type)  # type: ignore[attr-defined]
            self.store(zero, self.fuser.alloc(op.results[0], self.host), m.map, like=op)
            return
        if isinstance(op, tg.GatherOp | tg.ScatterAddOp | tg.RandomOp):
            self.indexed(m)
            return
        if isinstance(op, tg.PadOp | tg.ConcatOp):  # reads its inputs where they exist
            self.finish_member(m, self.shaped(op))
            return
        maps = m.operand_maps or tuple(m.map for _ in op.operands)
        in_prologue = m.prologue or m.operand_maps is not None  # a root reads its domain
        args = [self.operand(v, mp, in_prologue) for v, mp in zip(op.operands, maps)]
        if isinstance(op, tg.AssignOp):
            self.store(args[0], self.fuser.params[op.key.data], m.map)
            return
        self.finish_member(m, self.compute(op, args))

    def indexed(self, m: Member) -> None:
        """gather / scatter_add (a data-dependent index as the map's symbol) and random."""
        op = m.op
        if isinstance(op, tg.RandomOp):
            scalar = AffineMap(m.map.num_dims, 0, ())
            counter = self.operand(op.counter, scalar, m.prologue)
            shape = shape_of(op.result)
            linear = sum(
                (e * stride for e, stride in zip(m.map.results, affine.strides_of(shape))),
                AffineExpr.constant(0),
            )
            lin_map = affine.simplify(AffineMap(m.map.num_dims, 0, (linear,)), self.sizes(m))
            result = self.add(K.RandomOp(counter, lin_map, op.seed.value.data), op)
            self.finish_member(m, result)
            return
        dim = op.dim.value.data
        data = op.input if isinstance(op, tg.GatherOp) else op.results[0]
        base, vmap = resolve(data)
        if isinstance(op, tg.GatherOp) and is_splat(base):  # (a zero cotangent's slice)
            self.finish_member(m, self.operand(base, m.map, m.prologue))
            return
        index = self.operand(op.index, m.map, m.prologue)
        point = list(m.map.results)
        point[dim] = AffineExpr.symbol(0)
        map = vmap.compose(AffineMap(m.map.num_dims, 1, tuple(point)))
        if isinstance(op, tg.GatherOp):
            buffer = self.arg(self.fuser.buffers[base])
            self.finish_member(m, self.add(K.GatherOp(buffer, map, index), op))
        else:
            value = self.operand(op.src, m.map, m.prologue)
            buffer = self.arg(self.fuser.alloc(op.results[0], self.host))
            self.add(K.ScatterAddOp(value, buffer, map, index), op)

    def sizes(self, m: Member) -> tuple[int, ...]:
        return self.g.domain if m.prologue else self.g.domain[: self.g.parallel]

    def finish_member(self, m: Member, result: SSAValue) -> None:
        """Records a member's scalar; stores it when others need it (`Member.stored`),
        and the views of it that host ops read (`Member.views`)."""
        self.scalars[m.op.results[0]] = result
        if m.stored:
            self.store(result, self.fuser.alloc(m.op.results[0], self.host), m.map)
        for view in m.views:  # a host op's view of this value, laid out plainly
            self.store(result, self.fuser.alloc(view, self.host))

    def store(
        self,
        value: SSAValue,
        buffer: SSAValue,
        map: AffineMap | None = None,
        like: Operation | None = None,
    ) -> None:
        """Stores `value` at `map`, at the location of `like` (default: value's op)."""
        map = map or affine.identity_map(self.g.parallel)
        like = like or (value.owner if isinstance(value.owner, Operation) else None)
        props = {"map": AffineMapAttr(map)}
        self.add(K.StoreOp.create(operands=[value, self.arg(buffer)], properties=props), like)

    def compute(self, op: Operation, args: list[SSAValue]) -> SSAValue:
        row = SEMANTICS.get(type(op))
        if row is not None:  # `tg.recip %x` is `arith.divf 1.0, %x`
            first = [] if row.first is None else [self.constant(row.first, args[0].type)]
            return self.add(fast.float_op(row.kernel, *first, *args), op)
        if isinstance(op, tg.CmpLtOp):
            return self.add(arith.CmpfOp(args[0], args[1], "olt"), op)
        if isinstance(op, tg.WhereOp):
            return self.add(arith.SelectOp(args[0], args[1], args[2]), op)
        if isinstance(op, tg.CastOp):
            return self.cast(op, args[0])
        if isinstance(op, tg.ReduceOp):
            return self.add(
                _reduce("add" if isinstance(op, tg.ReduceSumOp) else "max", args[0]), op
            )
        if isinstance(op, tg.DotOp):
            ones = [_is_one(v) for v in args]
            prod = args[1] if ones[0] else args[0] if ones[1] else None
            if prod is None:
                prod = self.add(fast.float_op(arith.MulfOp, args[0], args[1]), op)
            return self.add(_reduce("add", prod), op)
        raise AssertionError(f"convert-tg-to-kernel: no kernel form for {op.name}")

    def cast(self, op: tg.CastOp, x: SSAValue) -> SSAValue:
        src, dst = x.type, op.result.type.element_type  # type: ignore[attr-defined]
        if src == dst:
            return x
        if src == i1:
            return self.add(arith.UIToFPOp(x, dst), op)
        if dst == i1:
            return self.add(arith.CmpfOp(x, self.constant(0.0, src), "une"), op)
        widths = {t: n for n, t in enumerate(FLOAT_TYPES)}
        wider = widths.get(type(dst), 0) > widths.get(type(src), 0)
        return self.add((arith.ExtFOp if wider else arith.TruncFOp)(x, dst), op)

    def shaped(self, op: tg.PadOp | tg.ConcatOp) -> SSAValue:
        """pad/concat: loads at in-range (mod) indices, picked by index conditions."""
        shape = shape_of(op.result)
        d = affine.dims(len(shape))
        idx = self.block.args
        if isinstance(op, tg.PadOp):
            low, n = ints(op.low), shape_of(op.input)
            map = AffineMap(len(shape), 0, tuple((d[k] - low[k]) % n[k] for k in range(len(shape))))
            inside = None
            for k in range(len(shape)):
                for bound, pred in ((low[k], "sge"), (low[k] + n[k], "slt")):
                    c = self.add(arith.CmpiOp(idx[k], self.index(bound), pred), op)
                    inside = c if inside is None else self.add(arith.AndIOp(inside, c), op)
            x = self.operand(op.input, map, False)  # through the views between it and its base
            pad = self.constant(op.value.value.data, op.result.type.element_type)  # type: ignore[attr-defined]
            return self.add(arith.SelectOp(inside, x, pad), op) if inside is not None else x
        dim = op.dim.value.data
        offsets = list(itertools.accumulate([0] + [shape_of(v)[dim] for v in op.inputs]))
        result: SSAValue | None = None
        for k in reversed(range(len(op.inputs))):
            n = shape_of(op.inputs[k])[dim]
            exprs = [d[j] if j != dim else (d[j] - offsets[k]) % n for j in range(len(shape))]
            part = self.operand(op.inputs[k], AffineMap(len(shape), 0, tuple(exprs)), False)
            if result is None:
                result = part
            else:
                below = self.add(arith.CmpiOp(idx[dim], self.index(offsets[k + 1]), "slt"), op)
                result = self.add(arith.SelectOp(below, part, result), op)
        assert result is not None
        return result

    def index(self, value: int) -> SSAValue:
        return self.add(arith.ConstantOp(IntegerAttr(value, IndexType())))

    def finish(self, name: str, root: Operation) -> K.KernelOp:
        g = self.g
        kind = g.kind if g.parallel < len(g.domain) else "elementwise"
        block = self.block
        op = K.KernelOp.create(
            operands=list(self.outer),
            regions=[Region(block)],
            properties={
                "sym_name": StringAttr(name),
                "kind": StringAttr(kind),
                "domain": _i64_array(g.domain),
                "parallel": fast.scalar_attr(g.parallel, i64),
            },
        )
        op.location = root.location
        return op


@lru_cache(maxsize=4096)
def _i64_array(values: tuple[int, ...]) -> Attribute:
    """A shared `array<i64: ...>` (kernel domains repeat)."""
    return i64_array(values)


def _reduce(kind: str, value: SSAValue) -> K.ReduceOp:
    """`kernel.reduce kind value` (as its constructor builds it, without the checks)."""
    return K.ReduceOp.create(
        operands=[value], result_types=[value.type], properties={"kind": StringAttr(kind)}
    )


def _is_one(value: SSAValue) -> bool:
    """Whether a kernel scalar is the constant 1.0 (autodiff's seed, a ones operand)."""
    owner = value.owner
    return (
        isinstance(owner, arith.ConstantOp)
        and isinstance(owner.value, FloatAttr)
        and owner.value.value.data == 1.0
    )
