"""What every runner shares: the protocol, the result, and the run state.

Five runners run a program: the interpreters (`backend.interpreters`) `tg.run`,
`kernel.run_kernels` and `lowered.run_lowered`, and the compiled programs'
`CProgram.run` and `CudaProgram.run`. Each takes the same keywords and gives a
`RunResult`; the interpreters also take the module (`Interpreter`), a compiled
program already holds it (`Executable`):

    result = interpreters.tg.run(module, feeders={"x": xs}, params={"w": w})
    result = compile_c(module).run(feeders={"x": xs}, params={"w": w})
    result.results, result.params, result.received["loss"]

`RunState` holds everything a run shares across ops (the param store, feeder
call counters, what receivers got); every runner reads and writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from math import prod
from typing import Any, Protocol

import numpy as np
from xdsl import interpreter as xdsl_interpreter
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.interpreter import OpImplResult, PythonValues, impl
from xdsl.ir import Attribute, Operation

from gradfuse.backend.mpi import receives_here
from gradfuse.backend.run_control import check_fed_finite, check_params_finite, interrupted
from gradfuse.diagnostics import GradfuseError, Position, position_of
from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.passes.loops.loop_ir import is_kernel

Feeder = Callable[[], np.ndarray] | np.ndarray
"""A feeder: a callable called once per run of the op, or an array."""


@dataclass(frozen=True)
class Event:
    """One timed execution of a host site of a profiled run: ns of the monotonic clock
    (`time.monotonic_ns()`, C's `CLOCK_MONOTONIC`), and the iteration of the outermost
    loop around it (-1 outside loops). `kind` is `kernel`, `feeder`, `receiver`, `copy`,
    `step` (one iteration of the outermost loop) or, on the reference backend, `op` (one
    tg op, `op` holding it). `launch` indexes `gradfuse.profiler.launches()` (kernels
    and callbacks of a compiled program). `grid` and `block` are a kernel's launch
    configuration on cuda (`"(64, 1)"`, `"(256, 1, 1)"`), else "".

        Event(site=2, kind="kernel", name="r0", launch=1, iteration=1, start_ns=..., end_ns=...)
    """

    site: int
    kind: str
    name: str
    launch: int | None
    iteration: int
    start_ns: int
    end_ns: int
    op: Operation | None = None
    grid: str = ""
    block: str = ""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class RunResult:
    """What a run produced: results, final params and everything received."""

    results: list[np.ndarray]
    """The entry function's return values."""
    params: dict[str, np.ndarray]
    """Final param values (the given ones, updated by `tg.assign`)."""
    received: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)
    """Receiver key -> one list of arrays per call of that receiver."""
    events: list[Any] = field(default_factory=list)
    """A profiled run's timed events (`Event`), else empty."""


class Executable(Protocol):
    """A program compiled for one backend (`CProgram`, `CudaProgram`)."""

    def run(
        self,
        *,
        args: Sequence[np.ndarray] = (),
        feeders: Mapping[str, Feeder] | None = None,
        receivers: Mapping[str, Callable[..., None]] | None = None,
        params: dict[str, np.ndarray] | None = None,
        entry: str = "main",
        check_finite: bool = False,
        profile: tuple[int, int] | None = None,
    ) -> RunResult:
        """Runs the entry function: `args` its arguments, `feeders` and `receivers` the
        host callbacks by key, `params` the initial param values (missing ones start
        from their `init`); with `check_finite`, a non-finite value fed or left in a
        param stops the run. Ctrl-C stops it at an iteration of the outermost loop.
        `profile=(first, last)` times the iterations first..last-1 of the outermost
        loop into `RunResult.events` (a profiling build of the c backend)."""
        ...


class Interpreter(Protocol):
    """An interpreter of a module (`interpreters.tg.run`, `run_kernels`, `run_lowered`)."""

    def __call__(
        self,
        module: ModuleOp,
        *,
        args: Sequence[np.ndarray] = (),
        feeders: Mapping[str, Feeder] | None = None,
        receivers: Mapping[str, Callable[..., None]] | None = None,
        params: dict[str, np.ndarray] | None = None,
        entry: str = "main",
        check_finite: bool = False,
        profile: tuple[int, int] | None = None,
    ) -> RunResult:
        """As `Executable.run`, for `module` (`profile`: the reference interpreter times
        each tg op, the others raise)."""
        ...


def check_window(window: tuple[int, int] | None) -> tuple[int, int] | None:
    """`run(profile=window)`'s window, checked: (first, last) iterations of the outermost
    loop, -1 <= first < last (-1: what runs outside loops); None: not profiling."""
    if window is not None and not (
        isinstance(window, tuple | list) and len(window) == 2
        and all(isinstance(i, int) for i in window) and -1 <= window[0] < window[1]
    ):  # fmt: skip
        raise GradfuseError(
            f"run(profile={window!r}): the window is (first, last) iterations of the"
            " outermost loop, -1 <= first < last (-1: what runs outside the loops)"
        )
    return None if window is None else (window[0], window[1])


def callback_key(op: Operation) -> str:
    """The `gradfuse.key` of a host call (feeder or receiver) or a param global, else an
    empty string."""
    key = op.attributes.get("gradfuse.key")
    return key.data if isinstance(key, StringAttr) else ""


HOST_CALLS = {"gradfuse_feed_": "feeder", "gradfuse_receive_": "receiver",
              "gradfuse_allreduce_": "allreduce"}  # fmt: skip
"""The external functions the host program calls, by name prefix (`@gradfuse_feed_0`)."""


def host_call(callee: str) -> str:
    """What a host call of `@callee` does: "feeder", "receiver" or "allreduce" (a
    `tg.allreduce`), else "". `host_call(op.callee.root_reference.data)`"""
    return next((kind for prefix, kind in HOST_CALLS.items() if callee.startswith(prefix)), "")


def cannot_profile(backend: str, window: tuple[int, int] | None) -> None:
    """Raises when a runner that times nothing is asked to: `run(profile=...)`."""
    if window is not None:
        raise GradfuseError(
            f"the {backend} backend cannot profile: profile on c, cuda or reference"
            ' (execute(backend="c") inside `with gradfuse.profiler.profile():`)'
        )


class NamingInterpreter(xdsl_interpreter.Interpreter):
    """An xDSL interpreter that turns any non-diagnostic error into a `GradfuseError`."""

    def _run_op(self, op: Operation, inputs: PythonValues) -> OpImplResult:
        try:
            return super()._run_op(op, inputs)
        except GradfuseError:
            raise
        except Exception as err:  # a bug or an unverified module: name the op
            raise GradfuseError(f"{op.name}: {err}", position_of(op.location)) from err


def tensor_of(ty: MemRefType) -> TensorType:
    """The tensor type of a buffer: `memref<2x3xf32>` -> `tensor<2x3xf32>`."""
    return TensorType(ty.element_type, ty.get_shape())


def entry_function(module: ModuleOp, entry: str = "main") -> func.FuncOp:
    """The lowered function named `entry`, else the module's only function with a body."""
    funcs = [
        op
        for op in module.body.block.ops
        if isinstance(op, func.FuncOp) and op.body.blocks and not is_kernel(op)
    ]
    named = [f for f in funcs if f.sym_name.data == entry]
    if named or len(funcs) == 1:
        return (named or funcs)[0]
    names = ", ".join(f"@{f.sym_name.data}" for f in funcs) or "none"
    raise GradfuseError(f"no entry function @{entry} in the module (functions: {names})")


_FLOATS: dict[type, type] = {
    Float16Type: np.float16,
    BFloat16Type: np.float32,  # NumPy has no bfloat16: compute in float32
    Float32Type: np.float32,
    Float64Type: np.float64,
}


def dtype_of(ty: Attribute, dtype: type = np.float32) -> np.dtype:
    """The NumPy dtype for a tensor type (or element type) under the run's `dtype`.

    With `dtype=np.float32` every float type keeps its own width (f16 stays f16);
    any other `dtype` (np.float64 for gradient checks) replaces every float type.
    """
    et = ty.element_type if isinstance(ty, TensorType) else ty
    if type(et) in _FLOATS:
        return np.dtype(dtype if np.dtype(dtype) != np.float32 else _FLOATS[type(et)])
    if isinstance(et, IntegerType):
        width = et.width.data
        return np.dtype(bool) if width == 1 else np.dtype(f"int{max(8, width)}")
    if isinstance(et, IndexType):
        return np.dtype(np.int64)
    raise GradfuseError(f"the reference interpreter has no NumPy type for {et}")


def attr_array(attr: Attribute, ty: TensorType, dtype: type = np.float32) -> np.ndarray:
    """The array of a constant or param init: a splat `FloatAttr` or a dense attribute."""
    shape, dt = tuple(ty.get_shape()), dtype_of(ty, dtype)
    if isinstance(attr, FloatAttr):
        return np.full(shape, attr.value.data, dtype=dt)
    if isinstance(attr, DenseIntOrFPElementsAttr):
        et = attr.get_element_type()
        fmt = getattr(et, "format", None)
        if fmt is None:
            raise GradfuseError(f"dense attributes of {et} are not supported")
        raw = np.frombuffer(attr.data.data, dtype=np.dtype(fmt))
        if isinstance(et, IntegerType) and et.width.data == 1:
            raw = raw != 0
        if raw.size == 1 and prod(shape) != 1:
            return np.full(shape, raw[0], dtype=dt)
        return raw.reshape(shape).astype(dt)
    raise GradfuseError(f"cannot make an array from {attr}")


def impls_for(ops: Iterable[type[Operation]], run: Callable[..., Any]) -> type:
    """A base class whose `@impl` for each op of `ops` is `run`, for an interpreter's
    functions to inherit (xDSL's `register_impls` reads base classes too):

        class TgFunctions(impls_for(SEMANTICS, run_elementwise), InterpreterFunctions): ...
    """
    return type("TableImpls", (), {f"run_{op.name}": impl(op)(run) for op in ops})


def shape_str(shape: tuple[int, ...]) -> str:
    """`(2, 255)`: a shape as NumPy writes it."""
    return str(tuple(int(d) for d in shape))


@dataclass
class RunState:
    """Everything one run shares across ops."""

    param_types: dict[str, TensorType]
    feeders: dict[str, Any]
    receivers: dict[str, Callable[..., None]]
    check_finite: bool = False
    """Stop at the first NaN or infinity a feeder returns or a param holds after an
    iteration of the outermost loop (`execute(check_finite=True)`)."""
    dtype: type = np.float32
    param_inits: dict[str, Attribute] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    received: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)
    feeder_calls: dict[str, int] = field(default_factory=dict)
    loop_depth: int = 0
    window: tuple[int, int] | None = None
    """Profiling (reference backend): time the ops of the outermost loop's iterations
    [first, last) into `events` (-1: the ops outside loops)."""
    iteration: int = -1
    """The iteration of the outermost loop running now (-1 outside loops)."""
    loops: int = 0
    """Outermost loops entered so far."""
    events: list[Event] = field(default_factory=list)

    def timing(self) -> bool:
        """Whether ops running now are profiled (the window holds this iteration)."""
        return self.window is not None and self.window[0] <= self.iteration < self.window[1]

    @contextmanager
    def keeping(self, finished: Callable[[], Mapping[str, np.ndarray]]) -> Iterator[None]:
        """Around an interpreter's run, NumPy's warnings off: Ctrl-C and a `GradfuseError`
        leave with copies of the params that the last finished iteration of the outermost
        loop left (`finished()`), the error also with what the receivers got."""
        try:
            with np.errstate(all="ignore"):
                yield
        except KeyboardInterrupt as stop:
            raise interrupted(finished(), stop) from None
        except GradfuseError as err:
            err.__notes__ = []  # xDSL's interpreter attaches the whole printed module to it
            err.params = {k: np.array(v) for k, v in finished().items()}  # type: ignore[attr-defined]
            err.received = self.received  # type: ignore[attr-defined]
            raise

    def check_param_value(self, key: str, value: Any) -> np.ndarray:
        """A copy of a given param value, checked against and cast to the param's type
        (one copy: ResNet-18's 45 MB of params are copied at each run)."""
        arr = np.asarray(value)
        ty = self.param_types.get(key)
        if ty is None:
            return np.array(arr)
        if arr.shape != tuple(ty.get_shape()) or arr.dtype.kind not in "biuf":
            raise GradfuseError(
                f'param "{key}": given {arr.dtype} value of shape {shape_str(arr.shape)},'
                f" expected {ty}"
            )
        return np.array(arr, dtype=dtype_of(ty, self.dtype))

    def start_value(
        self, key: str, given: Mapping[str, Any], init: Attribute, ty: TensorType, hint: str = "",
        position: Position | None = None,
    ) -> np.ndarray:  # fmt: skip
        """A param's first value: the given one (checked), else its dense `init`."""
        if key in given:
            return self.check_param_value(key, given[key])
        if not isinstance(init, DenseIntOrFPElementsAttr):
            raise GradfuseError(f'param "{key}" has no initial value{hint}', position)
        return attr_array(init, ty)

    def feed(self, key: str, ty: TensorType, position: Position | None) -> np.ndarray:
        """The next value of feeder `key`, checked against its type `ty`."""
        call = self.feeder_calls.get(key, 0)
        self.feeder_calls[key] = call + 1
        where = f'feeder "{key}" (call {call})'
        shape = tuple(ty.get_shape())
        if key not in self.feeders:
            given = ", ".join(f'"{k}"' for k in self.feeders) or "none"
            raise GradfuseError(f"{where}: no data given for it (feeders given: {given})", position)
        source = self.feeders[key]
        if callable(source):
            try:
                value = source()
            except Exception as err:
                raise GradfuseError(
                    f"{where}: raised {type(err).__name__}: {err}", position
                ) from err
        else:
            arr = np.asarray(source)
            if arr.shape == shape:
                value = arr
            elif arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
                if call >= arr.shape[0]:
                    raise GradfuseError(
                        f"{where}: exhausted, its array of shape {shape_str(arr.shape)}"
                        f" has {arr.shape[0]} items",
                        position,
                    )
                value = arr[call]
            else:
                per_call = "(N, " + ", ".join(map(str, shape)) + ")" if shape else "(N,)"
                raise GradfuseError(
                    f"{where}: array of shape {shape_str(arr.shape)} is neither"
                    f" {shape_str(shape)} nor {per_call}",
                    position,
                )
        try:
            arr = np.asarray(value)
        except Exception as err:
            raise GradfuseError(
                f"{where}: returned {type(value).__name__}, not an array", position
            ) from err
        if arr.dtype.kind not in "biuf":
            raise GradfuseError(f"{where}: returned {arr.dtype} data, expected numbers", position)
        if arr.shape != shape:
            raise GradfuseError(
                f"{where}: returned shape {shape_str(arr.shape)}, expected {shape_str(shape)}"
                f" ({fmt_shape(shape)})",
                position,
            )
        declared = dtype_of(ty)
        if arr.dtype != declared:
            raise GradfuseError(
                f"{where}: returned {arr.dtype} data, expected {declared} ({ty});"
                f" convert it with .astype(np.{declared})",
                position,
            )
        if self.check_finite:
            check_fed_finite(where, arr, position)
        return np.array(arr, dtype=dtype_of(ty, self.dtype))

    def after_iteration(self, params: Mapping[str, np.ndarray]) -> None:
        """Called after each iteration of the outermost loop with the params it left."""
        if self.check_finite:
            check_params_finite(params, "after this iteration")

    def after_run(self, params: Mapping[str, np.ndarray], looped: bool) -> None:
        """Called when a run ends; a program without a loop (`looped` False) has its
        params checked here, as a loop's are after each iteration."""
        if self.check_finite and not looped:
            check_params_finite(params, "at the end of the run")

    def receive(self, key: str, arrays: tuple[np.ndarray, ...], position: Position | None) -> None:
        """Records one call of receiver `key` and hands copies to its callback."""
        self.received.setdefault(key, []).append([np.array(a) for a in arrays])
        callback = self.receivers.get(key)
        if callback is None or not receives_here():  # (a data-parallel run: rank 0's)
            return
        try:
            callback(*[np.array(a) for a in arrays])
        except Exception as err:
            call = len(self.received[key]) - 1
            raise GradfuseError(
                f'receiver "{key}" (call {call}): raised {type(err).__name__}: {err}', position
            ) from err
