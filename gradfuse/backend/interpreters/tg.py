"""The reference interpreter: runs a `tg` program on NumPy (the numeric oracle).

Every other backend is tested against it. It uses xDSL's interpreter framework:
`TgFunctions` (in `tg_ops`) implements each tg op, xDSL's `FuncFunctions`
runs `func.func`, `func.call` and `func.return`.

    result = run(module, args=[x], feeders={"images": batch}, params={"w": w0})
    result.results[0], result.params["w"], result.received["out"][0]

Host interaction follows the program ops: `tg.feeder "k"` reads `feeders["k"]`,
`tg.receiver "k"` calls `receivers["k"]` and records into `RunResult.received`,
`tg.param` / `tg.assign` read and write `params`. Call and iteration numbers in
messages count from 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from time import monotonic_ns
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.interpreter import OpImplResult, PythonValues
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Attribute, Operation

from gradfuse.backend.interpreters.tg_conv import ConvFunctions
from gradfuse.backend.interpreters.tg_ops import RunState, TgFunctions, dtype_of
from gradfuse.backend.interpreters.tg_sparse import SparseFunctions
from gradfuse.backend.runner import (
    Event,
    Feeder,
    NamingInterpreter,
    RunResult,
    check_window,
    entry_function,
)
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import fmt_shape


def _collect_params(module: ModuleOp) -> tuple[dict[str, TensorType], dict[str, Attribute]]:
    """Type and init of every param key; all `tg.param`s of a key must agree on the type."""
    types: dict[str, TensorType] = {}
    inits: dict[str, Attribute] = {}
    for op in module.walk():
        if not isinstance(op, tg.ParamOp):
            continue
        key, ty = op.key.data, op.result.type
        assert isinstance(ty, TensorType)
        if key in types and types[key] != ty:
            raise GradfuseError(
                f'param "{key}" is read with two types: {types[key]} and {ty}',
                position_of(op.location),
            )
        types[key] = ty
        if op.init is not None and key not in inits:
            inits[key] = op.init
    return types, inits


def _check_args(fn: func.FuncOp, args: Sequence[np.ndarray], dtype: type) -> list[np.ndarray]:
    """The entry arguments, checked against the signature and cast to its element types."""
    inputs = fn.function_type.inputs.data
    if len(args) != len(inputs):
        raise GradfuseError(
            f"@{fn.sym_name.data} takes {len(inputs)} argument(s), {len(args)} given",
            position_of(fn.location),
        )
    out = []
    for i, (a, ty) in enumerate(zip(args, inputs, strict=True)):
        if not isinstance(ty, TensorType):
            raise GradfuseError(f"argument {i} of @{fn.sym_name.data} is not a tensor: {ty}")
        arr = np.asarray(a)
        want = tuple(ty.get_shape())
        if arr.shape != want or arr.dtype.kind not in "biuf":
            raise GradfuseError(
                f"argument {i} of @{fn.sym_name.data}: got {arr.dtype} array of shape"
                f" {fmt_shape(arr.shape)}, expected {ty}"
            )
        out.append(arr.astype(dtype_of(ty, dtype)))
    return out


class TimingInterpreter(NamingInterpreter):
    """The interpreter of a profiled run: every op of an outermost loop's iteration (a
    nested `tg.for` as one op) and, when -1 is in the window, every op outside loops
    becomes an `Event` of kind `op` in `state.events`; `run_for` adds the `step`s."""

    def __init__(self, module: ModuleOp, state: RunState):
        super().__init__(module)
        self.state = state

    def _run_op(self, op: Operation, inputs: PythonValues) -> OpImplResult:
        st = self.state
        skip = isinstance(op, tg.YieldOp | func.ReturnOp) or (
            st.loop_depth == 0 and isinstance(op, tg.ForOp)
        )
        if skip or st.loop_depth > 1 or not st.timing():
            return super()._run_op(op, inputs)
        start = monotonic_ns()
        out = super()._run_op(op, inputs)
        st.events.append(Event(-1, "op", op.name, None, st.iteration, start, monotonic_ns(), op))
        return out


def run(
    module: ModuleOp,
    *,
    args: Sequence[np.ndarray] = (),
    feeders: Mapping[str, Feeder] | None = None,
    receivers: Mapping[str, Callable[..., None]] | None = None,
    params: dict[str, np.ndarray] | None = None,
    entry: str = "main",
    dtype: type = np.float32,
    check_finite: bool = False,
    profile: tuple[int, int] | None = None,
) -> RunResult:
    """Runs the entry function of `module` on NumPy and returns what it produced.

    - `args`: the entry function's arguments.
    - `feeders`: per key a callable (called at every run of the `tg.feeder`), an
      array of the feeder's shape (returned every time), or an array of shape
      `(N, *shape)` whose item i is returned at call i (an error after N calls).
    - `receivers`: per key a callable, called with copies of the arrays as
      positional arguments; every call is also recorded in `RunResult.received`.
    - `params`: initial param values (copied, never mutated); a param missing here
      takes its `init`.
    - `dtype=np.float64` computes every float value in float64 (for
      finite-difference checks); the default keeps the program's own types.

    Raises `GradfuseError` for anything wrong, with the op's position. An error
    inside a `tg.for` names the iteration; the error's `params` attribute holds the
    params as they were at the end of the last finished iteration of the outermost
    loop, its `received` attribute what the receivers got until then. `check_finite`
    stops at the first NaN or infinity a feeder returns or a param holds after an
    iteration of the outermost loop (or after the run). Ctrl-C raises `KeyboardInterrupt`
    with the same `params` attribute. `profile=(first, last)` times each op of the
    iterations [first, last) of the outermost loop into the result's `events`
    (`Event(kind="op")`, one per op run, and one `step` per iteration).
    """
    fn = entry_function(module, entry)
    types, inits = _collect_params(module)
    state = RunState(types, dict(feeders or {}), dict(receivers or {}), check_finite, dtype, inits)
    for key, value in (params or {}).items():
        state.params[key] = state.check_param_value(key, value)
    initial = dict(state.params)
    call_args = _check_args(fn, args, dtype)
    state.window = check_window(profile)
    interpreter = TimingInterpreter(module, state) if profile else NamingInterpreter(module)
    interpreter.register_implementations(FuncFunctions())
    interpreter.register_implementations(TgFunctions(state))
    interpreter.register_implementations(SparseFunctions(state))
    interpreter.register_implementations(ConvFunctions(state))
    with state.keeping(lambda: state.params):
        results = interpreter.call_op(fn, tuple(call_args))
        try:
            state.after_run(state.params, any(isinstance(op, tg.ForOp) for op in fn.body.ops))
        except GradfuseError:
            state.params = dict(initial)  # the run finished no iteration: nothing kept
            raise
    return RunResult(
        results=[np.array(r) for r in results],
        params={k: np.array(v) for k, v in state.params.items()},
        received=state.received,
        events=state.events,
    )


def run_value(module: ModuleOp, *args: Any, **kwargs: Any) -> np.ndarray:
    """The single result of `run(module, args=args, **kwargs)`, for quick checks."""
    (out,) = run(module, args=args, **kwargs).results
    return out


__all__ = ["RunResult", "run", "run_value", "Feeder"]
