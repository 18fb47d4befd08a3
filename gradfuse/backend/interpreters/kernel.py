"""Runs kernel-dialect programs (the output of `convert-tg-to-kernel`) on NumPy, whole grids at once.

Each kernel body op is evaluated once on arrays over the kernel's domain: a load
gathers `buffer[map(every point)]`, arith/math ops work elementwise, a
`kernel.reduce` sums (or maxes) the reduction axes away, and stores scatter.
It checks fusion decisions fast and exactly, next to the reference interpreter:

    result = run_kernels(fused_module, feeders={"x": x}, params={"w": w})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap

from gradfuse import affine
from gradfuse.affine import eval_grid
from gradfuse.backend.cstyle import comparison
from gradfuse.backend.mpi import allreduce_array
from gradfuse.backend.runner import (
    RunResult,
    RunState,
    attr_array,
    cannot_profile,
    dtype_of,
    entry_function,
    tensor_of,
)
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import kernel as K
from gradfuse.dialects.tg_elementwise import KERNEL_NUMPY
from gradfuse.philox import uniform

_ARRAY_OPS: dict[type, Callable[..., Any]] = {**KERNEL_NUMPY, arith.AndIOp: np.logical_and}
"""Scalar ops as NumPy functions on whole grids: tg's arithmetic (`KERNEL_NUMPY`) and
the `and` of pad conditions."""
_COMPARE = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal,
}  # fmt: skip
"""NumPy's comparison per `cstyle.comparison` of an `arith.cmpf` / `arith.cmpi`."""


def run_kernels(
    module: ModuleOp,
    *,
    args: tuple[np.ndarray, ...] | list[np.ndarray] = (),
    feeders: Mapping[str, Any] | None = None,
    receivers: Mapping[str, Callable[..., None]] | None = None,
    params: dict[str, np.ndarray] | None = None,
    entry: str = "main",
    check_finite: bool = False,
    profile: tuple[int, int] | None = None,
) -> RunResult:
    """Runs `entry` of a fused module; the API and the errors are `interpreters.tg.run`'s."""
    cannot_profile("numpy", profile)
    fn = entry_function(module, entry)
    types = {
        op.key.data: tensor_of(op.result.type) for op in fn.walk() if isinstance(op, K.ParamOp)
    }
    state = RunState(types, dict(feeders or {}), dict(receivers or {}), check_finite)
    for key, value in (params or {}).items():
        state.params[key] = state.check_param_value(key, value)
    machine = _Machine(state)
    machine.snapshot = {k: np.array(v) for k, v in state.params.items()}
    block = fn.body.block
    for arg, value in zip(block.args, args):
        machine.env[arg] = np.array(value, dtype=dtype_of(tensor_of(arg.type)))  # type: ignore[arg-type]
    with state.keeping(lambda: machine.snapshot):
        results = machine.block(block, outer=True)
        state.after_run(state.params, any(isinstance(op, K.ForOp) for op in block.ops))
    return RunResult([np.array(r) for r in results], dict(state.params), state.received)


class _Machine:
    def __init__(self, state: RunState):
        self.state = state
        self.env: dict[SSAValue, Any] = {}
        self.snapshot: dict[str, np.ndarray] = {}
        self.grids: dict[tuple[int, tuple[int, ...]], Any] = {}  # per (op, shape): indices

    def indices(self, op: K.LoadOp | K.StoreOp, shape: tuple[int, ...]) -> Any:
        """The flat positions a load or store touches, computed once per op."""
        key = (id(op), shape)
        if key not in self.grids:
            buf_shape = tuple(op.buffer.type.get_shape())  # type: ignore[attr-defined]
            idx = eval_grid(op.map.data, shape)
            self.grids[key] = np.ravel_multi_index(idx, buf_shape) if buf_shape else ()
        return self.grids[key]

    def block(self, block: Block, outer: bool = False) -> list[np.ndarray]:
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                return [self.env[v] for v in op.arguments]
            self.host(op, outer)
        return []

    def host(self, op: Operation, outer: bool) -> None:
        s = self.state
        if isinstance(op, K.ParamOp):
            key = op.key.data
            if key not in s.params:
                if op.init is None:
                    raise GradfuseError(
                        f'param "{key}" has no initial value', position_of(op.location)
                    )
                s.params[key] = attr_array(op.init, tensor_of(op.result.type))
            self.env[op.result] = s.params[key]
        elif isinstance(op, K.AllocOp):
            self.env[op.result] = np.zeros(
                op.result.type.get_shape(), dtype_of(tensor_of(op.result.type))
            )
        elif isinstance(op, K.ConstantOp):
            self.env[op.result] = attr_array(op.value, tensor_of(op.result.type))
        elif isinstance(op, K.FeedOp):
            ty = tensor_of(op.buffer.type)  # type: ignore[arg-type]
            self.env[op.buffer][...] = s.feed(op.key.data, ty, position_of(op.location))
        elif isinstance(op, K.ReceiveOp):
            s.receive(op.key.data, tuple(self.env[b] for b in op.buffers), position_of(op.location))
        elif isinstance(op, K.AllReduceOp):
            allreduce_array(self.env[op.source], self.env[op.target], op.reduce.data)
        elif isinstance(op, K.KernelOp):
            self.kernel(op)
        elif isinstance(op, K.LAUNCH_GROUPS):
            # a row-by-row run equals its kernels one after another (`row_conflict`)
            for k in op.body.block.ops:
                self.kernel(k)  # type: ignore[arg-type]
        elif isinstance(op, K.ForOp):
            self.loop(op, outer)
        elif not isinstance(op, K.YieldOp):
            raise GradfuseError(
                f"kernel interpreter: unexpected host op {op.name}", position_of(op.location)
            )

    def loop(self, op: K.ForOp, outer: bool) -> None:
        lo, hi, st = op.bounds
        for i in range(lo, hi, st):
            try:
                self.block(op.body.block)
                if outer:
                    self.state.after_iteration(self.state.params)
            except GradfuseError as err:
                err.message += f" (in iteration {(i - lo) // st} of the loop)"
                raise GradfuseError(err.message, err.position) from None
            if outer:  # what an error or Ctrl-C from now on keeps
                self.snapshot = {k: np.array(v) for k, v in self.state.params.items()}

    def kernel(self, k: K.KernelOp) -> None:
        domain, par = k.domain_sizes, k.num_parallel
        env: dict[SSAValue, Any] = dict(zip(k.buffer_args, (self.env[b] for b in k.buffers)))
        grid = np.indices(domain, dtype=np.int64) if domain else np.zeros((0,), np.int64)
        for i, a in enumerate(k.index_args):
            env[a] = grid[i] if 0 < len(domain) else 0
        epilogue = False
        for op in k.body.block.ops:
            if isinstance(op, K.ReduceOp):
                axes = tuple(range(par, len(domain)))
                x = np.broadcast_to(env[op.value], domain)
                env[op.result] = x.sum(axis=axes) if op.kind.data == "add" else x.max(axis=axes)
                if not epilogue:
                    epilogue = True
                    for i, a in enumerate(k.index_args[:par]):
                        env[a] = np.indices(domain[:par], dtype=np.int64)[i]
                continue
            shape = domain[:par] if epilogue else domain
            self.body_op(op, env, shape)

    def indexed(self, op: Any, env: dict[SSAValue, Any], shape: tuple[int, ...]) -> None:
        buf = env[op.buffer]
        index = np.rint(np.asarray(env[op.index], dtype=np.float64)).astype(np.int64)
        where = _with_symbol(op.map.data, index, shape)
        for k, (w, n) in enumerate(zip(where, buf.shape)):
            if w.size and (w.min() < 0 or w.max() >= n):
                raise GradfuseError(
                    f"{op.name}: index out of range in dim {k} (size {n})", position_of(op.location)
                )
        if isinstance(op, K.GatherOp):
            env[op.result] = buf[where]
        else:
            np.add.at(buf, where, np.broadcast_to(env[op.value], shape))

    def body_op(self, op: Operation, env: dict[SSAValue, Any], shape: tuple[int, ...]) -> None:
        if isinstance(op, K.LoadOp) and op.guard is not None:
            buf, mask = env[op.buffer], affine.eval_guard(op.guard.data, shape)
            where = tuple(np.where(mask, w, 0) for w in eval_grid(op.map.data, shape))
            env[op.result] = np.where(mask, buf[where], np.zeros((), buf.dtype))
        elif isinstance(op, K.LoadOp):
            buf = env[op.buffer]
            env[op.result] = buf.reshape(-1)[self.indices(op, shape)] if buf.ndim else buf[()]
        elif isinstance(op, K.StoreOp):
            value = np.broadcast_to(env[op.value], shape)
            buf = env[op.buffer]
            if buf.ndim:
                buf.reshape(-1)[self.indices(op, shape)] = value
            else:
                buf[()] = value
        elif isinstance(op, K.GatherOp | K.ScatterAddOp):
            self.indexed(op, env, shape)
        elif isinstance(op, K.RandomOp):
            (linear,) = eval_grid(op.map.data, shape)
            counter = float(np.asarray(env[op.counter]).reshape(-1)[0])
            env[op.result] = uniform(linear, counter, op.seed.value.data)
        elif isinstance(op, arith.ConstantOp):
            env[op.result] = op.value.value.data  # type: ignore[attr-defined]
        elif type(op) in _ARRAY_OPS:
            env[op.results[0]] = _ARRAY_OPS[type(op)](*[env[v] for v in op.operands])
        elif isinstance(op, arith.CmpfOp | arith.CmpiOp):
            env[op.result] = _COMPARE[comparison(op)](env[op.lhs], env[op.rhs])
        elif isinstance(op, arith.SelectOp):
            env[op.result] = np.where(env[op.cond], env[op.lhs], env[op.rhs])
        elif isinstance(op, arith.UIToFPOp | arith.ExtFOp | arith.TruncFOp):
            env[op.result] = np.asarray(env[op.input]).astype(dtype_of(op.result.type))
        else:
            raise GradfuseError(
                f"kernel interpreter: no NumPy form for {op.name}", position_of(op.location)
            )
        for r in op.results:  # keep float32 semantics as a device would
            v = env[r]
            if isinstance(v, np.ndarray) and v.dtype == np.float64:
                env[r] = v.astype(np.float32)
            elif isinstance(v, float):
                env[r] = np.float32(v)


def _with_symbol(map: AffineMap, index: np.ndarray, shape: tuple[int, ...]) -> tuple:
    """The map's results at every point of `shape`, its symbol s0 taking `index`."""
    dims_only = AffineMap(
        map.num_dims + 1, 0, tuple(e.replace_dims_and_symbols(
            affine.dims(map.num_dims + 1)[: map.num_dims], (AffineExpr.dimension(map.num_dims),)
        ) for e in map.results)
    )  # fmt: skip
    grid = np.indices(shape, dtype=np.int64) if shape else np.zeros((0,), np.int64)
    full = np.concatenate([grid, np.broadcast_to(index, shape)[None].astype(np.int64)])
    return tuple(np.broadcast_to(affine._eval(e, full), shape) for e in dims_only.results)
