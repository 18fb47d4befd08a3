"""Upstream ops built through `Operation.create`, for the lowering passes' hot paths.

xDSL's generic op constructors check and convert every argument (about 30 us an
op here, 3x a plain `create`); the lowering passes build tens of thousands of
ops, so they build them here, with exactly the properties that the generic
constructors would set, and share immutable attributes:

    cmpi(gid, end, "ult")     # = arith.CmpiOp(gid, end, "ult")
    index_op(arith.AddiOp, a, b, flags=True)   # = arith.AddiOp(a, b)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from xdsl.dialects import arith, gpu, memref, scf
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FunctionType,
    IndexType,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    UnitAttr,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import Rewriter

from gradfuse.dialects.tg_base import scalar_attr

INDEX = IndexType()
_NO_FLAGS = arith.IntegerOverflowAttr("none")
_CMPI = {
    "eq": 0, "ne": 1, "slt": 2, "sle": 3, "sgt": 4, "sge": 5,
    "ult": 6, "ule": 7, "ugt": 8, "uge": 9,
}  # fmt: skip
_X = gpu.DimensionAttr(gpu.DimensionEnum.X)
_NO_FASTMATH = arith.FastMathFlagsAttr("none")


def constant(value: int | float, ty: Attribute = INDEX) -> arith.ConstantOp:
    """`arith.constant value : ty` (an index constant by default)."""
    return arith.ConstantOp.create(properties={"value": scalar_attr(value, ty)}, result_types=[ty])


def index_op(cls: type[Operation], lhs: SSAValue, rhs: SSAValue, flags: bool = False) -> Operation:
    """A binary op on index values; `flags` adds the empty `overflowFlags` that the
    generic constructors of addi/subi/muli set."""
    props = {"overflowFlags": _NO_FLAGS} if flags else {}
    return cls.create(operands=[lhs, rhs], result_types=[INDEX], properties=props)


def float_op(cls: type[Operation], *operands: SSAValue) -> Operation:
    """An arith/math op on floats (`arith.addf`, `math.exp2`...) with the empty `fastmath`
    flags that their generic constructors set; the result has the first operand's type."""
    return cls.create(
        operands=operands, result_types=[operands[0].type], properties={"fastmath": _NO_FASTMATH}
    )


def cmpi(lhs: SSAValue, rhs: SSAValue, predicate: str) -> arith.CmpiOp:
    """`arith.cmpi predicate, lhs, rhs` (an i1)."""
    props = {"predicate": scalar_attr(_CMPI[predicate], i64)}
    return arith.CmpiOp.create(operands=[lhs, rhs], result_types=[i1], properties=props)


def select(cond: SSAValue, lhs: SSAValue, rhs: SSAValue) -> arith.SelectOp:
    """`arith.select cond, lhs, rhs`."""
    return arith.SelectOp.create(operands=[cond, lhs, rhs], result_types=[lhs.type])


def gpu_index(cls: type[Operation]) -> Operation:
    """`gpu.thread_id x`, `gpu.block_id x` or `gpu.block_dim x`."""
    return cls.create(properties={"dimension": _X}, result_types=[INDEX])


def scf_yield(*values: SSAValue) -> scf.YieldOp:
    """`scf.yield values`."""
    return scf.YieldOp.create(operands=values)


def scf_for(
    lb: SSAValue, ub: SSAValue, step: SSAValue, inits: Sequence[SSAValue], body: Block
) -> scf.ForOp:
    """`scf.for` over `body` (index argument first, then one per init)."""
    return scf.ForOp.create(
        operands=[lb, ub, step, *inits],
        result_types=[v.type for v in inits],
        regions=[Region(body)],
    )


def scf_if(cond: SSAValue, then: Block, otherwise: Block | None) -> scf.IfOp:
    """`scf.if` without results; an empty else region when `otherwise` is None."""
    other = Region(otherwise) if otherwise is not None else Region()
    return scf.IfOp.create(operands=[cond], regions=[Region(then), other])


def load(buffer: SSAValue, indices: Sequence[SSAValue]) -> Operation:
    """`memref.load buffer[indices]`."""
    return memref.LoadOp.create(
        operands=[buffer, *indices],
        result_types=[buffer.type.element_type],  # type: ignore[attr-defined]
    )


def store(value: SSAValue, buffer: SSAValue, indices: Sequence[SSAValue]) -> Operation:
    """`memref.store value, buffer[indices]`."""
    return memref.StoreOp.create(operands=[value, buffer, *indices])


def get_global(name: str, ty: Attribute) -> memref.GetGlobalOp:
    """`memref.get_global @name : ty`."""
    return memref.GetGlobalOp.create(properties={"name": SymbolRefAttr(name)}, result_types=[ty])


def view(arena: SSAValue, offset: SSAValue, ty: Attribute) -> memref.ViewOp:
    """`memref.view arena[offset][] : ... to ty`."""
    return memref.ViewOp.create(operands=[arena, offset], result_types=[ty])


@lru_cache(maxsize=256)
def _launch_segments(num_args: int) -> DenseArrayBase:
    """`operandSegmentSizes` of a launch: async deps, grid x/y/z, block x/y/z, cluster
    x/y/z, dynamic shared memory, kernel operands, async object."""
    return DenseArrayBase.from_list(i32, [0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, num_args, 0])


def launch_func(
    kernel: SymbolRefAttr,
    grid: Sequence[SSAValue],
    block: Sequence[SSAValue],
    args: Sequence[SSAValue],
) -> gpu.LaunchFuncOp:
    """`gpu.launch_func @kernel blocks in (grid) threads in (block) args(args)`."""
    return gpu.LaunchFuncOp.create(
        operands=[*grid, *block, *args],
        properties={"kernel": kernel, "operandSegmentSizes": _launch_segments(len(args))},
    )


def gpu_func(name: str, entry: Block) -> gpu.FuncOp:
    """`gpu.func @name(entry's arguments) kernel` with `entry` as its body."""
    ty = FunctionType.from_lists([a.type for a in entry.args], [])
    return gpu.FuncOp.create(
        properties={"function_type": ty, "kernel": UnitAttr()},
        attributes={"sym_name": StringAttr(name)},
        regions=[Region(entry)],
    )


WORKGROUP = 3
"""The memory space of GPU workgroup (shared) memory: `memref<16x16xf32, 3 : i64>`,
NVVM's address space 3."""


def is_workgroup(ty: Attribute) -> bool:
    """Whether a memref type lives in GPU workgroup (shared) memory."""
    space = getattr(ty, "memory_space", None)
    return isinstance(space, IntegerAttr) and space.value.data == WORKGROUP


def workgroup_alloca(element: Attribute, shape: Sequence[int]) -> memref.AllocaOp:
    """`memref.alloca() : memref<shape x element, 3 : i64>`: a block's shared array while
    a kernel is being built; `workgroup_globals` makes it MLIR's form before the kernel
    joins the gpu.module (an alloca is per-thread memory to MLIR, whatever its space)."""
    space = IntegerAttr(WORKGROUP, i64)
    return memref.AllocaOp.get(element, None, list(shape), memory_space=space)


def workgroup_globals(fn: gpu.FuncOp) -> list[memref.GlobalOp]:
    """Turns each workgroup `memref.alloca` of `fn` into a `memref.get_global` of a new
    global in workgroup memory, which it returns for the kernel's gpu.module: a block's
    shared array as MLIR's NVVM lowering makes `.shared` memory (and what a gpu.func
    workgroup attribution becomes there):

        memref.global "private" @k3_shared0 : memref<16x16xf32, 3 : i64> = uninitialized
        gpu.func @k3(...) kernel {
          %9 = memref.get_global @k3_shared0 : memref<16x16xf32, 3 : i64>
    """
    made: list[memref.GlobalOp] = []
    for op in list(fn.walk()):
        if isinstance(op, memref.AllocaOp) and is_workgroup(op.memref.type):
            name = f"{fn.sym_name.data}_shared{len(made)}"
            made.append(memref.GlobalOp.get(StringAttr(name), op.memref.type, UnitAttr()))
            found = get_global(name, op.memref.type)
            found.location = op.location
            Rewriter.replace_op(op, found)
    return made


def clone(op: Operation, mapper: dict[SSAValue, SSAValue]) -> Operation:
    """`op.clone(value_mapper=mapper)`: operands through `mapper`, which gains the new
    results. Without regions in one step (xDSL's `clone` creates the op without operands,
    then walks the old op and the new one to set them)."""
    if op.regions:
        return op.clone(value_mapper=mapper)
    return op.clone_without_regions(mapper)
