"""NumPy implementations of every tg op for xDSL's interpreter (see `tg`).

Values are NumPy arrays of the op's result type (`dtype_of`); ops never write
into their operands, so arrays may be shared freely (params, loop values).

    %y = tg.dot %x, %w : tensor<2x255xf32>      ->  np.matmul(x, w)
    %s = tg.reduce_sum %y dims=[1] : tensor<2xf32>  ->  np.sum(y, axis=(1,))
"""

from __future__ import annotations

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
from gradfuse.backend.runner import RunState, attr_array, dtype_of, impls_for, shape_str
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ints
from gradfuse.dialects.tg_elementwise import SEMANTICS


def _in_iteration(err: GradfuseError, op: tg.ForOp, iteration: int, index: int) -> GradfuseError:
    """`err` again, saying in which iteration of which (nested) `tg.for` it happened."""
    base: str = getattr(err, "tg_base_message", err.message)
    pos = position_of(op.location)
    here = f"iteration {iteration} (i = {index}) of the tg.for" + (f" at {pos}" if pos else "")
    loops: list[str] = [here, *getattr(err, "tg_loops", [])]
    new = GradfuseError(f"{base} (in {', '.join(loops)})", err.position)
    new.tg_base_message = base  # type: ignore[attr-defined]
    new.tg_loops = loops  # type: ignore[attr-defined]
    return new


def _run_elementwise(self: TgFunctions, interp: Interpreter, op: Operation, args: PythonValues):
    """Every elementwise arithmetic op: its row of `SEMANTICS` on arrays."""
    return self.out(op, SEMANTICS[type(op)].numpy(*args))


@register_impls
class TgFunctions(impls_for(SEMANTICS, _run_elementwise), InterpreterFunctions):  # type: ignore[misc]
    """One `@impl` per tg op (the arithmetic from `SEMANTICS`); `state` is shared
    with `interpreters.tg.run`."""

    def __init__(self, state: RunState):
        self.state = state

    def out(self, op: Operation, *values: Any) -> PythonValues:
        """The results as arrays of the result types (NumPy turns 0-d results into scalars)."""
        return tuple(
            np.asarray(v, dtype=dtype_of(r.type, self.state.dtype))
            for v, r in zip(values, op.results, strict=True)
        )

    # --- elementwise -----------------------------------------------------------------

    @impl(tg.CmpLtOp)
    def run_cmplt(self, interp: Interpreter, op: tg.CmpLtOp, args: PythonValues) -> PythonValues:
        return self.out(op, np.less(*args))

    @impl(tg.WhereOp)
    def run_where(self, interp: Interpreter, op: tg.WhereOp, args: PythonValues) -> PythonValues:
        return self.out(op, np.where(*args))

    @impl(tg.CastOp)
    def run_cast(self, interp: Interpreter, op: tg.CastOp, args: PythonValues) -> PythonValues:
        (x,) = args
        if dtype_of(op.result.type, self.state.dtype) == np.bool_:
            return self.out(op, x != 0)
        return self.out(op, x)

    # --- composites (reference semantics; tg-decompose expands them) ----------------------

    @impl(tg.SigmoidOp)
    def run_sigmoid(
        self, interp: Interpreter, op: tg.SigmoidOp, args: PythonValues
    ) -> PythonValues:
        (x,) = args
        one = np.ones((), dtype=x.dtype)
        return self.out(op, one / (one + np.exp(-x)))

    @impl(tg.TanhOp)
    def run_tanh(self, interp: Interpreter, op: tg.TanhOp, args: PythonValues) -> PythonValues:
        return self.out(op, np.tanh(args[0]))

    @impl(tg.ReluOp)
    def run_relu(self, interp: Interpreter, op: tg.ReluOp, args: PythonValues) -> PythonValues:
        (x,) = args
        return self.out(op, np.maximum(x, np.zeros((), dtype=x.dtype)))

    @impl(tg.SoftmaxOp)
    def run_softmax(
        self, interp: Interpreter, op: tg.SoftmaxOp, args: PythonValues
    ) -> PythonValues:
        (x,) = args
        dim = op.dim.value.data
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return self.out(op, e / np.sum(e, axis=dim, keepdims=True))

    # --- contraction and reductions ---------------------------------------------------

    @impl(tg.DotOp)
    def run_dot(self, interp: Interpreter, op: tg.DotOp, args: PythonValues) -> PythonValues:
        return self.out(op, np.matmul(*args))

    @impl(tg.ReduceSumOp)
    def run_reduce_sum(
        self, interp: Interpreter, op: tg.ReduceSumOp, args: PythonValues
    ) -> PythonValues:
        return self.out(op, np.sum(args[0], axis=ints(op.dims)))

    @impl(tg.ReduceMaxOp)
    def run_reduce_max(
        self, interp: Interpreter, op: tg.ReduceMaxOp, args: PythonValues
    ) -> PythonValues:
        return self.out(op, np.max(args[0], axis=ints(op.dims)))

    @impl(tg.StopGradientOp)
    def run_stop_gradient(
        self, interp: Interpreter, op: tg.StopGradientOp, args: PythonValues
    ) -> PythonValues:
        return self.out(op, args[0])

    @impl(tg.ReduceMeanOp)
    def run_reduce_mean(
        self, interp: Interpreter, op: tg.ReduceMeanOp, args: PythonValues
    ) -> PythonValues:
        return self.out(op, np.mean(args[0], axis=ints(op.dims)))

    # --- constants and data movement ---------------------------------------------------

    @impl(tg.ConstantOp)
    def run_constant(
        self, interp: Interpreter, op: tg.ConstantOp, args: PythonValues
    ) -> PythonValues:
        ty = op.result.type
        assert isinstance(ty, TensorType)
        return (attr_array(op.value, ty, self.state.dtype),)

    @impl(tg.ReshapeOp)
    def run_reshape(
        self, interp: Interpreter, op: tg.ReshapeOp, args: PythonValues
    ) -> PythonValues:
        ty = op.result.type
        assert isinstance(ty, TensorType)
        return self.out(op, np.reshape(args[0], tuple(ty.get_shape())))

    @impl(tg.PermuteOp)
    def run_permute(
        self, interp: Interpreter, op: tg.PermuteOp, args: PythonValues
    ) -> PythonValues:
        return self.out(op, np.transpose(args[0], ints(op.perm)))

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

    @impl(tg.BroadcastOp)
    def run_broadcast(
        self, interp: Interpreter, op: tg.BroadcastOp, args: PythonValues
    ) -> PythonValues:
        ty = op.result.type
        assert isinstance(ty, TensorType)
        return self.out(op, np.broadcast_to(args[0], tuple(ty.get_shape())))

    @impl(tg.SliceOp)
    def run_slice(self, interp: Interpreter, op: tg.SliceOp, args: PythonValues) -> PythonValues:
        window = tuple(
            slice(lo, hi, st)
            for lo, hi, st in zip(ints(op.starts), ints(op.limits), ints(op.strides), strict=True)
        )
        return self.out(op, args[0][window])

    @impl(tg.PadOp)
    def run_pad(self, interp: Interpreter, op: tg.PadOp, args: PythonValues) -> PythonValues:
        widths = list(zip(ints(op.low), ints(op.high), strict=True))
        return self.out(op, np.pad(args[0], widths, constant_values=op.value.value.data))

    @impl(tg.ConcatOp)
    def run_concat(self, interp: Interpreter, op: tg.ConcatOp, args: PythonValues) -> PythonValues:
        return self.out(op, np.concatenate(args, axis=op.dim.value.data))

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

    @impl(tg.ForOp)
    def run_for(self, interp: Interpreter, op: tg.ForOp, args: PythonValues) -> PythonValues:
        st = self.state
        lo, hi, step = op.lower.value.data, op.upper.value.data, op.step.value.data
        outermost = st.loop_depth == 0
        carried = tuple(args)
        st.loop_depth += 1
        try:
            for iteration, i in enumerate(range(lo, hi, step)):
                snapshot = dict(st.params) if outermost else None
                try:
                    carried = interp.run_ssacfg_region(op.body, (i, *carried), "tg.for")
                    if snapshot is not None:
                        st.after_iteration(st.params)
                except KeyboardInterrupt:
                    if snapshot is not None:  # Ctrl-C: the params of the last full iteration
                        st.params.clear()
                        st.params.update(snapshot)
                    raise
                except GradfuseError as err:
                    if snapshot is not None:  # params as at the end of the last full iteration
                        st.params.clear()
                        st.params.update(snapshot)
                    raise _in_iteration(err, op, iteration, i) from err
        finally:
            st.loop_depth -= 1
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
