"""NumPy implementations of every tg op for xDSL's interpreter (see `tg`).

Values are NumPy arrays of the op's result type (`dtype_of`); ops never write
into their operands, so arrays may be shared freely (params, loop values).

    %y = tg.dot %x, %w : tensor<2x255xf32>      ->  np.matmul(x, w)
    %s = tg.reduce_sum %y dims=[1] : tensor<2xf32>  ->  np.sum(y, axis=(1,))
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic_ns
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
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
from xdsl.ir import Operation

from gradfuse.affine import eval_grid, eval_guard
from gradfuse.backend.run_control import in_iteration
from gradfuse.backend.runner import (
    Event,
    RunState,
    attr_array,
    dtype_of,
    impls_for,
    shape_str,
)
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ints
from gradfuse.dialects.tg_elementwise import SEMANTICS


def _result_shape(op: Any) -> tuple[int, ...]:
    return tuple(op.result.type.get_shape())


def _sigmoid(op: Any, x: np.ndarray) -> np.ndarray:
    one = np.ones((), dtype=x.dtype)
    return one / (one + np.exp(-x))


def _softmax(op: tg.SoftmaxOp, x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=op.dim.value.data, keepdims=True))
    return e / np.sum(e, axis=op.dim.value.data, keepdims=True)


NUMPY: dict[type[Operation], Callable[..., Any]] = {
    tg.CmpLtOp: lambda op, a, b: np.less(a, b),
    tg.WhereOp: lambda op, c, a, b: np.where(c, a, b),
    tg.SigmoidOp: _sigmoid,
    tg.TanhOp: lambda op, x: np.tanh(x),
    tg.ReluOp: lambda op, x: np.maximum(x, np.zeros((), dtype=x.dtype)),
    tg.SoftmaxOp: _softmax,
    tg.StopGradientOp: lambda op, x: x,
    tg.DotOp: lambda op, a, b: np.matmul(a, b),
    tg.ReduceSumOp: lambda op, x: np.sum(x, axis=ints(op.dims)),
    tg.ReduceMaxOp: lambda op, x: np.max(x, axis=ints(op.dims)),
    tg.ReduceMeanOp: lambda op, x: np.mean(x, axis=ints(op.dims)),
    tg.ReshapeOp: lambda op, x: np.reshape(x, _result_shape(op)),
    tg.PermuteOp: lambda op, x: np.transpose(x, ints(op.perm)),
    tg.BroadcastOp: lambda op, x: np.broadcast_to(x, _result_shape(op)),
    tg.SliceOp: lambda op, x: x[
        tuple(map(slice, ints(op.starts), ints(op.limits), ints(op.strides)))
    ],
    tg.PadOp: lambda op, x: np.pad(
        x, list(zip(ints(op.low), ints(op.high))), constant_values=op.value.value.data
    ),
    tg.ConcatOp: lambda op, *xs: np.concatenate(xs, axis=op.dim.value.data),
}
"""The reference semantics of the tg ops that only compute (no state, no regions) and
are not elementwise arithmetic (`SEMANTICS`): `NUMPY[type(op)](op, *arrays)`."""


def _run_arithmetic(self: TgFunctions, interp: Interpreter, op: Operation, args: PythonValues):
    return self.out(op, SEMANTICS[type(op)].numpy(*args))


def _run_numpy(self: TgFunctions, interp: Interpreter, op: Operation, args: PythonValues):
    return self.out(op, NUMPY[type(op)](op, *args))


@register_impls
class TgFunctions(
    impls_for(SEMANTICS, _run_arithmetic),  # type: ignore[misc]
    impls_for(NUMPY, _run_numpy),  # type: ignore[misc]
    InterpreterFunctions,
):
    """One `@impl` per tg op: the arithmetic from `SEMANTICS`, the other pure ops from
    `NUMPY`, state, host I/O, loops and grad here; `state` is shared with
    `interpreters.tg.run`."""

    def __init__(self, state: RunState):
        self.state = state

    def out(self, op: Operation, *values: Any) -> PythonValues:
        """The results as arrays of the result types (NumPy turns 0-d results into scalars)."""
        return tuple(
            np.asarray(v, dtype=dtype_of(r.type, self.state.dtype))
            for v, r in zip(values, op.results, strict=True)
        )

    @impl(tg.CastOp)
    def run_cast(self, interp: Interpreter, op: tg.CastOp, args: PythonValues) -> PythonValues:
        (x,) = args
        if dtype_of(op.result.type, self.state.dtype) == np.bool_:
            return self.out(op, x != 0)
        return self.out(op, x)

    # --- constants and data movement ---------------------------------------------------

    @impl(tg.ConstantOp)
    def run_constant(
        self, interp: Interpreter, op: tg.ConstantOp, args: PythonValues
    ) -> PythonValues:
        ty = op.result.type
        assert isinstance(ty, TensorType)
        return (attr_array(op.value, ty, self.state.dtype),)

    @impl(tg.ViewAccessOp)
    def run_view(
        self, interp: Interpreter, op: tg.ViewAccessOp, args: PythonValues
    ) -> PythonValues:
        shape = tuple(op.result.type.get_shape())  # type: ignore[attr-defined]
        x = np.asarray(args[0])
        where = eval_grid(op.map.data, shape)
        if op.guard is None:
            return self.out(op, x[where])
        mask = eval_guard(op.guard.data, shape)
        clipped = tuple(np.where(mask, w, 0) for w in where)  # outside reads index 0
        return self.out(op, np.where(mask, x[clipped], np.zeros((), x.dtype)))

    # --- program: params, host I/O, loops, grad ----------------------------------------------

    @impl(tg.ParamOp)
    def run_param(self, interp: Interpreter, op: tg.ParamOp, args: PythonValues) -> PythonValues:
        st, key = self.state, op.key.data
        if key not in st.params:
            init = st.param_inits.get(key)
            if init is None:
                raise GradfuseError(
                    f'param "{key}" has no initial value (give it init=... or pass --params)',
                    position_of(op.location),
                )
            ty = op.result.type
            assert isinstance(ty, TensorType)
            st.params[key] = attr_array(init, ty, st.dtype)
        return (st.params[key],)

    @impl(tg.AssignOp)
    def run_assign(self, interp: Interpreter, op: tg.AssignOp, args: PythonValues) -> PythonValues:
        st, key = self.state, op.key.data
        (value,) = args
        ty = st.param_types.get(key)
        if ty is not None and value.shape != tuple(ty.get_shape()):
            raise GradfuseError(
                f'tg.assign "{key}": value of shape {shape_str(value.shape)} for a param'
                f" of type {ty}",
                position_of(op.location),
            )
        st.params[key] = value
        return ()

    @impl(tg.FeederOp)
    def run_feeder(self, interp: Interpreter, op: tg.FeederOp, args: PythonValues) -> PythonValues:
        ty = op.result.type
        assert isinstance(ty, TensorType)
        return (self.state.feed(op.key.data, ty, position_of(op.location)),)

    @impl(tg.ReceiverOp)
    def run_receiver(
        self, interp: Interpreter, op: tg.ReceiverOp, args: PythonValues
    ) -> PythonValues:
        self.state.receive(op.key.data, args, position_of(op.location))
        return ()

    @impl(tg.AllReduceOp)
    def run_allreduce(
        self, interp: Interpreter, op: tg.AllReduceOp, args: PythonValues
    ) -> PythonValues:
        from gradfuse.backend.mpi import allreduce_array

        (value,) = args
        out = np.empty_like(value)
        allreduce_array(value, out, op.reduce.data)
        return (out,)

    @impl(tg.ForOp)
    def run_for(self, interp: Interpreter, op: tg.ForOp, args: PythonValues) -> PythonValues:
        st = self.state
        lo, hi, step = op.bounds
        outermost = st.loop_depth == 0
        carried = tuple(args)
        st.loop_depth += 1
        loop = st.loops
        st.loops += outermost
        try:
            for iteration, i in enumerate(range(lo, hi, step)):
                snapshot = dict(st.params) if outermost else None
                st.iteration = iteration if outermost else st.iteration
                start = monotonic_ns() if outermost and st.timing() else 0  # profiling
                try:
                    carried = interp.run_ssacfg_region(op.body, (i, *carried), "tg.for")
                    if snapshot is not None:
                        st.after_iteration(st.params)
                    if outermost and st.timing():
                        end = monotonic_ns()
                        st.events.append(
                            Event(-1, "step", f"loop {loop}", None, iteration, start, end)
                        )
                except (KeyboardInterrupt, GradfuseError) as err:
                    if snapshot is not None:  # an error or Ctrl-C: the last full iteration's
                        st.params.clear()
                        st.params.update(snapshot)
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    raise in_iteration(err, op, iteration, i) from err
        finally:
            st.loop_depth -= 1
            st.iteration = -1 if outermost else st.iteration
        return carried

    @impl_terminator(tg.YieldOp)
    def run_yield(
        self, interp: Interpreter, op: tg.YieldOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()

    @impl(tg.GradOp)
    def run_grad(self, interp: Interpreter, op: tg.GradOp, args: PythonValues) -> PythonValues:
        raise GradfuseError(
            "tg.grad cannot be run: it must be expanded by the `tg-autodiff` pass first",
            position_of(op.location),
        )


__all__ = ["TgFunctions", "RunState", "dtype_of"]
