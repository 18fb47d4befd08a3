"""Interpreter functions for lowered IR that xDSL does not provide (see `lowered`).

Buffers are NumPy arrays (a `memref.view` shares its arena's memory); scalars
are NumPy scalars of their MLIR type, so f32 math stays f32:

    gpu.launch_func @gradfuse_kernels::@k0 blocks in (%c2, ...) threads in (%c32, ...)
        -> runs @k0 once per thread id, `gpu.thread_id x` answering for each; an
           element one thread writes and another reads or writes is a race: an error
    %v = memref.view %arena[%c64][] : memref<128xi8> to memref<2x4xf32>
        -> arena[64:96].view(float32).reshape(2, 4)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product
from math import prod
from typing import Any

import numpy as np
from xdsl.dialects import arith, gpu, math, memref
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, MemRefType
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import Attribute, Operation
from xdsl.utils.comparisons import to_unsigned

from gradfuse.backend.interpreters.lowered_lockstep import Lockstep, has_barrier
from gradfuse.backend.runner import dtype_of, impls_for
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects.tg_elementwise import KERNEL_NUMPY
from gradfuse.passes.lib.fast_ops import is_workgroup


@dataclass
class LoweredState:
    """What one run shares: the globals' arrays, the kernels and the current thread."""

    globals: dict[str, np.ndarray] = field(default_factory=dict)
    kernels: dict[tuple[str, str], gpu.FuncOp] = field(default_factory=dict)
    block_id: tuple[int, int, int] = (0, 0, 0)
    block_dim: tuple[int, int, int] = (1, 1, 1)
    grid_dim: tuple[int, int, int] = (1, 1, 1)
    thread_id: tuple[int, int, int] = (0, 0, 0)
    launches: int = 0
    kernel: str | None = None
    """The kernel being run, while a launch runs."""
    thread: int = 0
    """The linear id of the thread being run."""
    block: int = 0
    """The linear id of the block being run."""
    shared: dict[tuple[int, Operation], np.ndarray] = field(default_factory=dict)
    """Workgroup memory of the current launch: (block, its `memref.alloca`) -> array."""
    epoch: int = 0
    """How many barriers the block's threads have passed."""
    writers: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """Address of each element written in the current launch -> the last (thread, block,
    epoch) that wrote it."""
    readers: dict[int, set[tuple[int, int, int]]] = field(default_factory=dict)
    """Address of each element read in the current launch -> the (thread, block, epoch)s
    that read it."""

    def access(self, op: Operation, array: np.ndarray, index: tuple[int, ...], write: bool) -> None:
        """Records an access of a kernel thread; a race with another thread is an error.
        Accesses of two threads of one block are ordered when a barrier lies between."""
        if self.kernel is None:
            return
        addr = array.ctypes.data + sum(i * s for i, s in zip(index, array.strides))
        me = (self.thread, self.block, self.epoch)

        def ordered(other: tuple[int, int, int]) -> bool:
            return other[0] == me[0] or (other[1] == me[1] and other[2] < me[2])

        writer = self.writers.get(addr)
        others = [writer[0]] if writer is not None and not ordered(writer) else []
        if write:
            others = others or [r[0] for r in self.readers.get(addr, ()) if not ordered(r)]
            self.writers[addr] = me
        else:
            self.readers.setdefault(addr, set()).add(me)
        if others:
            raise GradfuseError(
                f"kernel {self.kernel}: threads {min(others)} and {self.thread} race on element"
                f" {list(index)} of a buffer of shape {list(array.shape)} (one writes what the"
                " other reads or writes)",
                position_of(op.location),
            )


_DIMS = {gpu.DimensionEnum.X: 0, gpu.DimensionEnum.Y: 1, gpu.DimensionEnum.Z: 2}


def _discarded(interp: Interpreter, op: memref.LoadOp) -> bool:
    """Whether `op` is a guarded load (`kernel_lowering.guarded_load`) whose guard fails
    here: indices `select(inside, i, 0)` and a value used only as `select(inside, v, 0.0)`.
    It reads element 0 for a value that is thrown away, so it races with nothing."""
    owners = [i.owner for i in op.indices]
    if not owners or not all(isinstance(o, arith.SelectOp) for o in owners):
        return False
    conds = {o.cond for o in owners}  # type: ignore[union-attr]
    if len(conds) != 1:
        return False
    (cond,) = conds
    for use in op.res.uses:
        user = use.operation
        if not (isinstance(user, arith.SelectOp) and user.cond is cond and use.index == 1):
            return False
    return not interp.get_values((cond,))[0]


def _check_bounds(op: Operation, array: np.ndarray, indices: tuple[int, ...]) -> None:
    if len(indices) != array.ndim or any(not 0 <= i < n for i, n in zip(indices, array.shape)):
        raise GradfuseError(
            f"{op.name}: index {list(indices)} is outside a buffer of shape {list(array.shape)}",
            position_of(op.location),
        )


def _run_id(self: Any, interp: Interpreter, op: Any, args: PythonValues) -> PythonValues:
    """`gpu.thread_id x` and the like: the `LoweredState` field named as the op
    (`thread_id`, `block_id`, `block_dim`, `grid_dim`), in the op's dimension."""
    return (getattr(self.state, op.name.removeprefix("gpu."))[_DIMS[op.dimension.data]],)


_IDS = (gpu.ThreadIdOp, gpu.BlockIdOp, gpu.BlockDimOp, gpu.GridDimOp)


@register_impls
class GpuMemrefFunctions(impls_for(_IDS, _run_id), InterpreterFunctions):  # type: ignore[misc]
    """`gpu.launch_func` and the thread ids it sets; `memref` on NumPy arrays."""

    def __init__(self, state: LoweredState):
        self.state = state

    @impl(gpu.LaunchFuncOp)
    def run_launch(
        self, interp: Interpreter, op: gpu.LaunchFuncOp, args: PythonValues
    ) -> PythonValues:
        values = dict(zip(op.operands, args))
        grid = tuple(values[v] for v in (op.gridSizeX, op.gridSizeY, op.gridSizeZ))
        block = tuple(values[v] for v in (op.blockSizeX, op.blockSizeY, op.blockSizeZ))
        ref = op.kernel
        fn = self.state.kernels.get((ref.root_reference.data, ref.nested_references.data[0].data))
        if fn is None:
            raise GradfuseError(f"gpu.launch_func: no kernel {ref}", position_of(op.location))
        st = self.state
        st.launches += 1
        st.grid_dim, st.block_dim = grid, block  # type: ignore[assignment]
        kernel_args = tuple(values[v] for v in op.kernelOperands)
        st.kernel, st.thread, st.block, st.epoch = fn.sym_name.data, 0, 0, 0
        st.writers.clear()
        st.readers.clear()
        st.shared.clear()
        phased = has_barrier(fn)
        try:
            for bz, by, bx in product(*(range(n) for n in reversed(grid))):
                st.block_id = (bx, by, bz)
                threads = list(product(*(range(n) for n in reversed(block))))
                if phased:
                    Lockstep(interp, st, threads).run(fn, kernel_args)
                    continue
                for tz, ty, tx in threads:
                    st.thread_id = (tx, ty, tz)
                    interp.run_ssacfg_region(fn.body, kernel_args, fn.sym_name.data)
                    st.thread += 1
                st.block += 1
        finally:
            st.kernel = None
        return ()

    @impl_terminator(gpu.ReturnOp)
    def run_return(
        self, interp: Interpreter, op: gpu.ReturnOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()

    @impl(memref.AllocOp)
    def run_alloc(self, interp: Interpreter, op: memref.AllocOp, args: PythonValues):
        ty = op.memref.type
        dt = dtype_of(ty.element_type)
        if dt == np.int8:  # an arena: filled with 0xff, so reading unwritten f32 gives NaN
            return (np.full(tuple(ty.get_shape()), 0xFF, dtype=np.uint8),)
        fill = np.nan if dt.kind == "f" else 0
        return (np.full(tuple(ty.get_shape()), fill, dtype=dt),)

    @impl(memref.AllocaOp)
    def run_alloca(self, interp: Interpreter, op: memref.AllocaOp, args: PythonValues):
        """Workgroup memory (memory space 3): one array for all the threads of a block;
        else one per thread."""
        return (self.array(op),)

    def array(self, op: memref.AllocaOp | memref.GetGlobalOp) -> np.ndarray:
        """A new array of `op`'s memref type (NaN floats, zero integers), or in workgroup
        memory the block's one array for `op`."""
        ty = op.memref.type
        dt = dtype_of(ty.element_type)  # type: ignore[attr-defined]
        fresh = np.full(tuple(ty.get_shape()), np.nan if dt.kind == "f" else 0, dtype=dt)  # type: ignore[attr-defined]
        if not is_workgroup(ty):
            return fresh
        return self.state.shared.setdefault((self.state.block, op), fresh)

    @impl(memref.DeallocOp)
    def run_dealloc(self, interp: Interpreter, op: memref.DeallocOp, args: PythonValues):
        return ()

    @impl(memref.ViewOp)
    def run_view(self, interp: Interpreter, op: memref.ViewOp, args: PythonValues):
        arena, offset = args[0], args[1]
        ty = op.result.type
        assert isinstance(ty, MemRefType)
        dt = dtype_of(ty.element_type)
        shape = tuple(ty.get_shape())
        end = offset + prod(shape) * dt.itemsize
        if offset < 0 or end > arena.size or offset % dt.alignment:
            raise GradfuseError(
                f"memref.view: bytes [{offset}, {end}) do not fit an arena of {arena.size}",
                position_of(op.location),
            )
        return (arena[offset:end].view(dt).reshape(shape),)

    @impl(memref.LoadOp)
    def run_load(self, interp: Interpreter, op: memref.LoadOp, args: PythonValues):
        array, *indices = args
        _check_bounds(op, array, tuple(indices))
        if not _discarded(interp, op):
            self.state.access(op, array, tuple(indices), write=False)
        return (array[tuple(indices)],)

    @impl(memref.StoreOp)
    def run_store(self, interp: Interpreter, op: memref.StoreOp, args: PythonValues):
        value, array, *indices = args
        _check_bounds(op, array, tuple(indices))
        self.state.access(op, array, tuple(indices), write=True)
        array[tuple(indices)] = value
        return ()

    @impl(memref.AtomicRMWOp)
    def run_atomic_rmw(self, interp: Interpreter, op: memref.AtomicRMWOp, args: PythonValues):
        value, array, *indices = args
        _check_bounds(op, array, tuple(indices))
        old = array[tuple(indices)]  # atomic: no race check; only addf is generated
        array[tuple(indices)] = old + value
        return (old,)

    @impl(memref.GetGlobalOp)
    def run_get_global(self, interp: Interpreter, op: memref.GetGlobalOp, args: PythonValues):
        """A host global (a param, a buffer); in a kernel, a block's shared array
        (`fast_ops.workgroup_globals`): one for all the threads of the block."""
        if is_workgroup(op.memref.type):
            return (self.array(op),)
        return (self.state.globals[op.name_.root_reference.data],)


def _unsigned(f: Callable[[int, int], int]) -> Callable[..., PythonValues]:
    def run(self: Any, interp: Interpreter, op: Operation, args: PythonValues) -> PythonValues:
        bits = interp.index_bitwidth
        return (f(to_unsigned(args[0], bits), to_unsigned(args[1], bits)),)

    return run


def _numpy(f: Callable[..., Any]) -> Callable[..., PythonValues]:
    def run(self: Any, interp: Interpreter, op: Operation, args: PythonValues) -> PythonValues:
        return (f(*args),)

    return run


def _convert(self: Any, interp: Interpreter, op: Operation, args: PythonValues) -> PythonValues:
    dt = dtype_of(op.results[0].type)
    return (dt.type(args[0]),)


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def _run_table(self: Any, interp: Interpreter, op: Operation, args: PythonValues) -> PythonValues:
    return (KERNEL_NUMPY[type(op)](*args),)


@register_impls
class ScalarFunctions(impls_for(KERNEL_NUMPY, _run_table), InterpreterFunctions):  # type: ignore[misc]
    """The arith and math ops of tg's arithmetic as `KERNEL_NUMPY` computes them (the
    NumPy runners' functions, f32 stays f32), f32 constants, and the other arith and
    math ops that xDSL lacks or computes in Python floats."""

    @impl(arith.ConstantOp)
    def run_constant(self, interp: Interpreter, op: arith.ConstantOp, args: PythonValues):
        value: Attribute = op.value
        if isinstance(value, FloatAttr):
            return (dtype_of(value.type).type(value.value.data),)
        assert isinstance(value, IntegerAttr)
        if isinstance(value.type, IntegerType) and value.type.width.data == 1:
            return (bool(value.value.data),)
        return (value.value.data,)

    run_divui = impl(arith.DivUIOp)(_unsigned(lambda a, b: a // b))
    run_remui = impl(arith.RemUIOp)(_unsigned(lambda a, b: a % b))
    run_ceildivui = impl(arith.CeilDivUIOp)(_unsigned(_ceildiv))
    run_ceildivsi = impl(arith.CeilDivSIOp)(_numpy(_ceildiv))
    run_maxnumf = impl(arith.MaxnumfOp)(_numpy(np.fmax))
    run_minnumf = impl(arith.MinnumfOp)(_numpy(np.fmin))
    run_uitofp = impl(arith.UIToFPOp)(_convert)
    run_sitofp = impl(arith.SIToFPOp)(_convert)
    run_extf = impl(arith.ExtFOp)(_convert)
    run_truncf = impl(arith.TruncFOp)(_convert)
    run_fptosi = impl(arith.FPToSIOp)(_numpy(int))
    run_shrui = impl(arith.ShRUIOp)(_unsigned(lambda a, b: a >> b))
    run_xori = impl(arith.XOrIOp)(_numpy(lambda a, b: a ^ b))

    run_exp = impl(math.ExpOp)(_numpy(np.exp))
    run_log = impl(math.LogOp)(_numpy(np.log))
    run_rsqrt = impl(math.RsqrtOp)(_numpy(lambda x: 1 / np.sqrt(x)))
    run_cos = impl(math.CosOp)(_numpy(np.cos))
    run_tanh = impl(math.TanhOp)(_numpy(np.tanh))
    run_absf = impl(math.AbsFOp)(_numpy(np.abs))
    run_floor = impl(math.FloorOp)(_numpy(np.floor))
    run_ceil = impl(math.CeilOp)(_numpy(np.ceil))
    run_powf = impl(math.PowFOp)(_numpy(np.power))


__all__ = ["LoweredState", "GpuMemrefFunctions", "ScalarFunctions"]
