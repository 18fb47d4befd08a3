"""The recording API: loops, host input/output, and running the recorded program.

ir_for(range(0, 1000), step)                       # step traced once into a tg.for
x = Feeder(lambda: batch(), shape=[2, 255])        # tg.feeder "feeder"
Receiver(save, opt.parameters, name="params")      # tg.receiver "params", ...
execute()                                          # compile, run, write params back
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np

from gradfuse.diagnostics import GradfuseError, unique_name
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.frontend.carry import carry, check_gradients, held, hoist, restore
from gradfuse.frontend.dtypes import element_for
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import (
    Program,
    changed,
    emit,
    error,
    insert_into,
    insertion_block,
    manual_seed,
    new_program,
    program,
)
from gradfuse.frontend.tensor import Tensor


def reset() -> None:
    """Discards the recorded program and starts a new one. `gradfuse.reset()`"""
    new_program()


def ir_text(print_locations: bool = False, after: str | None = None) -> str:
    """The recorded program as `.tg` text (what `ir-opt` reads); with `after`, the text
    after that pipeline or pass spec ran on a copy (`after="tg"`: differentiated and
    decomposed). `print(gradfuse.ir_text())`
    """
    from gradfuse.frontend.printer import print_tg

    module = program().module
    if after is not None:
        from gradfuse.passes import run_pipeline

        module = module.clone()
        run_pipeline(module, after)
    return print_tg(module, print_locations)


def print_graph(print_locations: bool = False, after: str | None = None) -> None:
    """Prints the recorded program as `.tg` text (see `ir_text`). `print_graph()`"""
    print(ir_text(print_locations, after), end="")


def ir_for(loop: range, fn: Callable[[], Any]) -> None:
    """Traces `fn()` once into the body of a `tg.for` over `loop`; it runs every iteration.

    `ir_for(range(0, 1000), step)` records `tg.for %i = 0 to 1000 step 1 { ... }`.
    """
    if not isinstance(loop, range):
        raise error(f"ir_for: expected a range, got {type(loop).__name__}")
    op = tg.ForOp(loop.start, loop.stop, loop.step, [])
    body = op.body.block
    body.add_op(tg.YieldOp())
    outer = insertion_block()
    before = held(fn)
    emit(op)
    try:
        with insert_into(body):
            fn()
        carry(before, op)
        check_gradients(op)
        hoist(before, op)
    except BaseException:
        restore(before)  # what the failed body set goes with it
        program().forget(body)
        op.detach()
        op.erase(safe_erase=False)
        changed()
        raise
    program().forget(body)
    program().forget(outer)


def Feeder(  # noqa: N802 (the seed program's name)
    fn: Callable[[], np.ndarray] | np.ndarray,
    shape: Sequence[int],
    dtype: Any = np.float32,
    name: str | None = None,
) -> Tensor:
    """Host -> device input: `fn()` is called each time the program reaches the feeder.

    `x = Feeder(lambda: np.full((2, 255), 0.2, np.float32), shape=[2, 255])` records
    `%x = tg.feeder "feeder" : tensor<2x255xf32>`. An integer `dtype` (class labels,
    token ids: `dtype=np.int64`) feeds float32, gradfuse's integers, converted on the
    host (each value must be an integer below 2**24 in size, kept exactly).
    """
    if np.dtype(dtype).kind in "iu":
        fn, dtype = _as_float_integers(fn), np.float32
    prog = program()
    key = unique_name(name or "feeder", prog.feeders)
    op = emit(tg.FeederOp(key, tensor([int(d) for d in shape], element_for(dtype))))
    prog.feeders[key] = fn  # type: ignore[assignment]
    return Tensor(op.result)


def _as_float_integers(fn: Callable[[], np.ndarray] | np.ndarray) -> Any:
    """`fn` (or an array) whose integers are fed as float32 (exact below 2**24)."""

    def convert(values: Any) -> np.ndarray:
        arr = np.asarray(values)
        if arr.dtype.kind not in "iub":
            raise ValueError(f"expected integers (the feeder's dtype), got {arr.dtype} data")
        if arr.size and np.abs(arr).max() >= 2**24:
            raise ValueError("an integer of 2**24 or more has no exact float32")
        return arr.astype(np.float32)

    if callable(fn):
        return lambda: convert(fn())
    return convert(fn)


def _values(tensors: object) -> list[Tensor]:
    if callable(tensors) and not isinstance(tensors, Tensor):
        tensors = tensors()
    if isinstance(tensors, Tensor):
        return [tensors]
    if isinstance(tensors, dict):
        tensors = tensors.values()
    if not isinstance(tensors, Iterable):
        raise error(
            f"Receiver: expected tensors, a list of them or a callable, got {type(tensors).__name__}"
        )
    out = list(tensors)
    for t in out:
        if not isinstance(t, Tensor):
            raise error(f"Receiver: expected tensors, got a {type(t).__name__}")
    return out


def Receiver(  # noqa: N802 (the seed program's name)
    fn: Callable[..., None], tensors: object, name: str | None = None
) -> None:
    """Device -> host output: `fn(*arrays)` is called each time the program gets here.

    `tensors` is a Tensor, a list of them, or a callable returning them (such as
    `opt.parameters`); a `Parameter` gives its current value.
    `Receiver(save, opt.parameters, name="saving params")` records
    `tg.receiver "saving params", %w0, %b0, ...`.
    """
    prog = program()
    values = [t.value for t in _values(tensors)]
    key = unique_name(name or "receiver", prog.receivers)
    emit(tg.ReceiverOp(key, values))
    prog.receivers[key] = fn


def _write_back(params: dict[str, Parameter], values: dict[str, np.ndarray]) -> None:
    """The params' final values into the model: the arrays of the run's result (a run
    copies the params it starts from, so they belong to it), cast where a dtype differs;
    as `model.state_dict()` in PyTorch, a result's params share memory with the model's."""
    for key, param in params.items():
        if key in values:
            param.host = np.asarray(values[key], dtype=param.host.dtype)


class Compiled:
    """The recorded program compiled for one backend (`gradfuse.compile()`).

    `.kernels`, `.kernels_per_iteration` and `.peak_bytes` count launches and
    temporary memory of the fused program; `.run()` runs it and writes the final
    param values back into the model. `execute()` is `compile().run()`: both reuse
    the compiled program of an unchanged recording.
    """

    def __init__(self, backend: str, dtype: Any = None):
        from gradfuse.backend import compile_module

        prog = program()
        self.origin: Program | None = prog
        self.version = prog.version
        self.source = prog.module.clone()
        self.feeders, self.receivers, self.params = prog.feeders, prog.receivers, prog.params
        self.dtype = dtype
        self.program = compile_module(prog.module.clone(), backend)
        self.backend = self.program.backend
        self._stats: Any = None

    @property
    def stats(self) -> Any:
        """Launch counts and arena bytes of the program lowered by the default pipeline."""
        if self._stats is None:
            from gradfuse.passes import run_pipeline
            from gradfuse.stats import kernel_stats

            module = self.program.module
            if self.program.backend in ("reference", "numpy"):
                module = self.source.clone()
                run_pipeline(module, "default")
            self._stats = kernel_stats(module)
        return self._stats

    @property
    def kernels(self) -> int:
        return self.stats.kernels

    @property
    def kernels_per_iteration(self) -> int:
        return self.stats.kernels_per_iteration

    @property
    def peak_bytes(self) -> int:
        return self.stats.peak_bytes

    def listing(self) -> str:
        """The readable listing of the fused kernels (`ir-opt -t kernels`)."""
        from gradfuse.dump import dump_kernels
        from gradfuse.passes import run_pipeline

        module = self.source.clone()
        run_pipeline(module, "kernels")
        return dump_kernels(module)

    def run(self, *, check_finite: bool | None = None) -> Any:
        """Runs the program; params are read from and written back to the model.

        The recording it was compiled from, if still unchanged, is consumed: recording
        starts anew. `check_finite` (default `$GRADFUSE_CHECK_FINITE=1`) stops at the
        first non-finite value a feeder returns or a param takes, see `execute`.
        A Ctrl-C stops the run at the end of an iteration of the outermost loop: the
        params keep what the finished iterations made, and `KeyboardInterrupt` is raised.
        """
        if self.origin is not None and program() is self.origin:
            if self.origin.version == self.version:
                new_program()
            self.origin = None
        initial = {key: p.host for key, p in self.params.items()}
        extra: dict[str, Any] = {"dtype": self.dtype} if self.dtype is not None else {}
        if extra and self.backend != "reference":
            raise GradfuseError("execute(dtype=...) needs backend='reference'")
        if check_finite is None:
            check_finite = os.environ.get("GRADFUSE_CHECK_FINITE", "") not in ("", "0")
        if check_finite:
            extra["check_finite"] = True
        from gradfuse.profiler.session import active

        session = active()  # inside `with gradfuse.profiler.profile():`, a profiled run
        run = (
            self.program.run if session is None else partial(session.run, self.program, self.source)
        )
        try:
            result = run(feeders=self.feeders, receivers=self.receivers, params=initial, **extra)
        except GradfuseError as err:
            _write_back(self.params, getattr(err, "params", {}))
            clean = GradfuseError(err.message, err.position)
            clean.params = getattr(err, "params", {})  # type: ignore[attr-defined]
            raise clean from None
        except KeyboardInterrupt as interrupt:  # params as the last finished iteration left them
            _write_back(self.params, getattr(interrupt, "params", {}))
            raise
        _write_back(self.params, result.params)
        return result


def compile(backend: str | None = None, *, dtype: Any = None) -> Compiled:  # noqa: A001
    """Compiles the recorded program without running it (or gives the program compiled
    before, while the recording is unchanged); `.run()` or `execute()` runs it.

    `backend`, else `$GRADFUSE_BACKEND`, else cuda when PyCUDA sees a GPU, else c.
    `gradfuse.compile().kernels_per_iteration`
    """
    from gradfuse.backend import choose_backend

    if dtype is not None and backend is None:
        backend = "reference"  # only the reference interpreter computes in float64
    name = choose_backend(backend)
    prog = program()
    if prog.is_empty():
        raise error(
            "nothing is recorded to compile or execute (a program runs once, and recording"
            " starts anew after it ran): record a model's step, an ir_for or a Receiver first"
        )
    key = (name, "" if dtype is None else np.dtype(dtype).str, prog.version)
    found = prog.compiled.get(key)
    if found is None:
        found = prog.compiled[key] = Compiled(name, dtype)
    return found


def execute(
    backend: str | None = None, *, dtype: Any = None, check_finite: bool | None = None
) -> Any:
    """Compiles the recorded program (or reuses what `compile()` made of it), runs it and
    writes the final params back.

    The backend is `backend`, else `$GRADFUSE_BACKEND`, else cuda when PyCUDA sees
    a GPU, else c (see `gradfuse.backend`). Recording then starts anew, so a second
    `execute()` runs only what was recorded after the first (nothing recorded is an
    error). Returns the run's `RunResult`. `dtype=np.float64` (reference backend only)
    computes every float value in float64, for checks against float64 NumPy.
    `check_finite=True` (or `$GRADFUSE_CHECK_FINITE=1`) stops at the first NaN or
    infinity that a feeder returns or that a param takes after an iteration of the
    outermost loop, naming it and the iteration; the params keep the values of the
    last finished iteration. `execute()`
    """
    return compile(backend, dtype=dtype).run(check_finite=check_finite)


__all__ = [
    "execute", "ir_for", "Feeder", "Receiver", "print_graph", "ir_text", "reset",
    "manual_seed", "compile", "Compiled",
]  # fmt: skip
