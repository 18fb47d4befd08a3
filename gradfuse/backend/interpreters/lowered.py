"""Runs lowered IR (the output of `convert-kernel-to-gpu`) on xDSL's interpreter.

The check that lowering keeps meaning: kernels run one thread at a time, so
small shapes only. xDSL's `func`, `scf` and `arith` interpreters run the host
code and the kernel bodies; `lowered_ops` adds `gpu.launch_func`, the thread
ids, `memref` on NumPy (arena views included) and the missing arith/math ops.

    module = parse(kernel_ir); ConvertKernelToGpuPass().apply(ctx, module)
    result = run_lowered(module, feeders={"x": x}, params={"w": w})
    result.params["w"], result.received["out"][0][0]

Params are the `memref.global`s with a `gradfuse.key`: seeded from `params`,
else from their initial value. The external functions with a `gradfuse.key`
are the host callbacks: `@gradfuse_feed_<n>` fills its buffer from the feeder
(as in `interpreters.tg.run`), `@gradfuse_allreduce_<n>` all-reduces its first buffer
into its second over the ranks, `@gradfuse_receive_<n>` hands its buffers to the
receiver and records them in `RunResult.received`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from xdsl.dialects import func, gpu, memref, scf
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, StringAttr
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.interpreters.arith import ArithFunctions
from xdsl.interpreters.func import FuncFunctions
from xdsl.interpreters.scf import ScfFunctions
from xdsl.ir import Operation

from gradfuse.backend.interpreters.lowered_ops import (
    GpuMemrefFunctions,
    LoweredState,
    ScalarFunctions,
)
from gradfuse.backend.mpi import allreduce_array
from gradfuse.backend.run_control import in_iteration
from gradfuse.backend.runner import (
    Feeder,
    NamingInterpreter,
    RunResult,
    RunState,
    attr_array,
    cannot_profile,
    dtype_of,
    entry_function,
    host_call,
    tensor_of,
)
from gradfuse.diagnostics import GradfuseError, position_of


class _LoweredInterpreter(NamingInterpreter):
    """Calls host callbacks for external functions; names the op of any error."""

    host: RunState

    def call_external(
        self, sym_name: str, op: Operation, inputs: PythonValues = ()
    ) -> PythonValues:
        key = op.attributes.get("gradfuse.key")
        if not isinstance(key, StringAttr):
            raise GradfuseError(f"call of the external function @{sym_name}, which is no callback")
        where = position_of(op.location)
        kind = host_call(sym_name)
        if kind == "feeder":
            (buffer,) = inputs
            ty = op.function_type.inputs.data[0]  # type: ignore[attr-defined]
            buffer[...] = self.host.feed(key.data, tensor_of(ty), where)
        elif kind == "receiver":
            self.host.receive(key.data, tuple(inputs), where)
        elif kind == "allreduce":
            source, target = inputs
            allreduce_array(source, target, key.data)
        else:
            raise GradfuseError(f"no host callback for the external function @{sym_name}")
        return ()


@register_impls
class HostLoops(InterpreterFunctions):
    """The outermost loops of the host function: each iteration's params are kept, so an
    error, a non-finite param (`check_finite`) or Ctrl-C leaves the params of the last
    finished iteration; an error names the iteration. Other loops run as xDSL's."""

    def __init__(self, host: RunState, globals_: dict[str, np.ndarray], keys: dict[str, str]):
        self.host, self.globals, self.keys = host, globals_, keys
        self.finished = self.params()

    def current(self) -> dict[str, np.ndarray]:
        """The params now, by key (the arrays themselves)."""
        return {k: self.globals[name] for k, name in self.keys.items()}

    def params(self) -> dict[str, np.ndarray]:
        """Copies of the params now, by key."""
        return {k: np.array(v) for k, v in self.current().items()}

    def restore(self) -> None:
        for key, name in self.keys.items():
            self.globals[name][...] = self.finished[key]

    @impl(scf.ForOp)
    def run_for(self, interp: Interpreter, op: scf.ForOp, args: PythonValues) -> PythonValues:
        lb, ub, step, *carried = args
        values = tuple(carried)
        outer = isinstance(op.parent_op(), func.FuncOp)
        for i in range(lb, ub, step):
            if not outer:
                values = interp.run_ssacfg_region(op.body, (i, *values), "for_loop")
                continue
            try:
                values = interp.run_ssacfg_region(op.body, (i, *values), "for_loop")
                self.host.after_iteration(self.current())
            except KeyboardInterrupt:
                self.restore()
                raise
            except GradfuseError as err:
                self.restore()
                raise in_iteration(err, op, (i - lb) // step, i) from None
            self.finished = self.params()
        return values


def _globals(
    module: ModuleOp, host: RunState, params: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The array of every `memref.global` and the global name of each param key."""
    arrays: dict[str, np.ndarray] = {}
    keys: dict[str, str] = {}
    for op in module.body.block.ops:
        if not isinstance(op, memref.GlobalOp):
            continue
        name, ty = op.sym_name.data, op.type
        key = op.attributes.get("gradfuse.key")
        init = op.initial_value
        if isinstance(key, StringAttr):
            if op.constant is None:
                keys[key.data] = name
                host.param_types[key.data] = tensor_of(ty)
            given = params if op.constant is None else {}
            hint, where = " (give it init=... or pass params)", position_of(op.location)
            arrays[name] = host.start_value(key.data, given, init, tensor_of(ty), hint, where)
        elif isinstance(init, DenseIntOrFPElementsAttr):
            arrays[name] = attr_array(init, tensor_of(ty))
        else:
            arrays[name] = np.full(tuple(ty.get_shape()), np.nan, dtype=dtype_of(ty.element_type))
    return arrays, keys


def run_lowered(
    module: ModuleOp,
    *,
    args: Sequence[np.ndarray] = (),
    feeders: Mapping[str, Feeder] | None = None,
    receivers: Mapping[str, Callable[..., None]] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    entry: str = "main",
    check_finite: bool = False,
    profile: tuple[int, int] | None = None,
) -> RunResult:
    """Runs the entry function of a lowered module and returns what it produced.

    `feeders`, `receivers` and `params` work as in `interpreters.tg.run`; `args` are the
    entry function's memref arguments (copied). `results` are copies of the
    returned memrefs, `params` the final value of every param by key.

    An error, a non-finite value (`check_finite`) or Ctrl-C inside an outermost loop
    leaves the params of the last finished iteration (the error's or the
    `KeyboardInterrupt`'s `params`), as `interpreters.tg.run`.

    `run_lowered(module, feeders={"x": x}).received["out"][0][0]`
    """
    cannot_profile("lowered", profile)
    fn = entry_function(module, entry)
    host = RunState({}, dict(feeders or {}), dict(receivers or {}), check_finite)
    state = LoweredState()
    state.globals, keys = _globals(module, host, params or {})
    for op in module.body.block.ops:
        if isinstance(op, gpu.ModuleOp):
            for k in op.body.block.ops:
                if isinstance(k, gpu.FuncOp):
                    state.kernels[(op.sym_name.data, k.sym_name.data)] = k
    interp = _LoweredInterpreter(module)
    interp.host = host
    interp.register_implementations(FuncFunctions())
    interp.register_implementations(ScfFunctions())
    interp.register_implementations(ArithFunctions())
    interp.register_implementations(ScalarFunctions(), override=True)
    interp.register_implementations(GpuMemrefFunctions(state))
    loops = HostLoops(host, state.globals, keys)
    interp.register_implementations(loops, override=True)
    call_args = tuple(np.array(a) for a in args)
    with host.keeping(lambda: loops.finished):
        results = interp.call_op(fn, call_args)
        host.after_run(loops.current(), any(isinstance(op, scf.ForOp) for op in fn.body.ops))
    return RunResult(
        results=[np.array(r) for r in results],
        params={k: np.array(state.globals[name]) for k, name in keys.items()},
        received=host.received,
    )


__all__ = ["run_lowered", "tensor_of"]
