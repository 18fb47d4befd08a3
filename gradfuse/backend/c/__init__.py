"""The CPU backend: the whole lowered program as C, compiled by gcc, run with ctypes.

Loops run inside C; feeders and receivers are callbacks into Python. Params are
NumPy arrays owned by Python and passed by pointer, so their final values need
no copy. Compiled libraries are cached on disk (see `cache`). Ctrl-C during a run
stops it at the next iteration of the outermost loop (a C SIGINT handler sets a flag
the loop checks) and raises `KeyboardInterrupt` with the params of the finished
iterations; `check_finite` checks the params after each such iteration (a callback).

    program = compile_c(lowered_module)
    result = program.run(feeders={"x": x}, params={"0.weight": w})

`compile_c(module, profile=True)` builds the profiling build, whose `run(profile=(first,
last))` times every kernel call, callback and param copy of the steps in that window
into `RunResult.events` (see `profile`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType

from gradfuse.backend.c.cache import build_library
from gradfuse.backend.c.host import (
    build_by_kernels,
    host_symbols,
    main_function,
    render_program,
    split_units,
)
from gradfuse.backend.c.profile import EVENT, capacity, read_events
from gradfuse.backend.mpi import world_size
from gradfuse.backend.run_control import in_iteration, interrupted, sigint_flag
from gradfuse.backend.runner import (
    RunResult,
    RunState,
    callback_key,
    check_window,
    dtype_of,
    entry_function,
    tensor_of,
)
from gradfuse.diagnostics import GradfuseError, Position, position_of
from gradfuse.passes import run_pipeline
from gradfuse.passes.loops.loop_ir import kernel_functions

FEED = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
RECEIVE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int
)
CHECK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_long)


class Context(ctypes.Structure):
    _fields_ = [
        ("params", ctypes.POINTER(ctypes.c_void_p)),
        ("args", ctypes.POINTER(ctypes.c_void_p)),
        ("results", ctypes.POINTER(ctypes.c_void_p)),
        ("arena", ctypes.c_void_p),
        ("feed", FEED),
        ("receive", RECEIVE),
        ("saved", ctypes.POINTER(ctypes.c_void_p)),
        ("sizes", ctypes.POINTER(ctypes.c_long)),
        ("iteration", ctypes.c_long),
        ("index", ctypes.c_long),
        ("loop", ctypes.c_long),
        ("ranks", ctypes.c_long),  # the process group's size (1: none; `tg.allreduce`)
        ("check", CHECK),
        ("events", ctypes.c_void_p),  # the profiling build's fields (the default ignores them)
        ("capacity", ctypes.c_long),
        ("count", ctypes.c_long),
        ("first", ctypes.c_long),
        ("last", ctypes.c_long),
    ]


@dataclass(frozen=True)
class HostBuffer:
    """A buffer the host program hands Python by pointer (a feeder's target, a
    receiver's source, a result), its type worked out once per program."""

    tensor: TensorType
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int

    @staticmethod
    def of(ty: MemRefType) -> HostBuffer:
        tensor = tensor_of(ty)
        dtype, shape = dtype_of(tensor), tuple(ty.get_shape())
        return HostBuffer(
            tensor, dtype, shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        )

    def at(self, ptr: int) -> np.ndarray:
        """The buffer at `ptr` as an array (no copy)."""
        raw = (ctypes.c_char * self.nbytes).from_address(ptr)
        return np.frombuffer(raw, dtype=self.dtype).reshape(self.shape)


@dataclass(frozen=True)
class HostCall:
    """A feeder or receiver call site of the host program: its callback's key, its
    buffers and its position in the user's program."""

    key: str
    buffers: tuple[HostBuffer, ...]
    position: Position | None

    @staticmethod
    def of(op: func.CallOp) -> HostCall:
        buffers = tuple(HostBuffer.of(a.type) for a in op.arguments)  # type: ignore[arg-type]
        return HostCall(callback_key(op), buffers, position_of(op.location))


def _contiguous(a: Any, dtype: Any = None) -> np.ndarray:
    """`a` as a C-contiguous array; unlike `np.ascontiguousarray`, 0-d stays 0-d."""
    return np.asarray(a, dtype=dtype, order="C")


def compile_c(module: ModuleOp, profile: bool = False, tail: str = "") -> CProgram:
    """Renders and compiles a module lowered by the `cpu` pipeline (gcc at
    `cache.OPTIMIZE`, OpenMP); `profile`: the profiling build,
    `compile_c(m, profile=True).run(profile=(1, 3)).events`; `tail`: the pipeline's
    function-local passes still to run (`kernel_tail`), which a program of 2 x `GROUP`
    kernels or more (not a profiling build) runs a group at a time, gcc compiling the
    groups before meanwhile."""
    return CProgram(module, profile, tail)


GROUP = 10
"""Kernels a group when the loop passes and gcc take turns (`build_by_kernels`): DCGAN
b8's 80 kernels in 8 groups, the first compiled while the next 7 are transformed."""


class CProgram:
    """A lowered module compiled to a shared library; `run` may be called many times.
    A profiling build (`profile=True`) lists its timed sites in `sites`."""

    def __init__(self, module: ModuleOp, profile: bool = False, tail: str = ""):
        self.module = module
        kernels = sum(1 for _ in kernel_functions(module))
        if tail and kernels >= 2 * GROUP and not profile:
            host, path = build_by_kernels(module, tail, GROUP)
        else:
            if tail:
                run_pipeline(module, tail)
            host = render_program(module, profile)

            def split(cores: int) -> list[str]:  # one unit per core, at least 8 kernels each
                return split_units(host, min(cores, len(host.kernel_texts) // 8))

            path = build_library(host.source, module, split)
        self.profile, self.sites, self.loop_trips = profile, host.sites, host.loop_trips
        self.source, self.saved, self.calls, self.loops = (
            host.source,
            host.saved,
            host.calls,
            host.loops,
        )
        self.lib = ctypes.CDLL(str(path))
        self.lib.gradfuse_main.argtypes = [ctypes.POINTER(Context)]
        self.lib.gradfuse_main.restype = ctypes.c_int
        self.lib.gradfuse_sigint.argtypes = [ctypes.c_int]
        self.lib.gradfuse_sigint.restype = ctypes.c_int
        by_name = {op.sym_name.data: op for op in module.ops if isinstance(op, memref.GlobalOp)}
        self.globals = [by_name[n] for n in host_symbols(module)]
        self.main = main_function(module)
        self.sites_of_calls = [HostCall.of(op) for op in self.calls]
        allocs = [op for op in self.main.walk() if isinstance(op, memref.AllocOp)]
        self.arena_bytes = max((int(np.prod(a.memref.type.get_shape())) for a in allocs), default=1)  # type: ignore[attr-defined]
        # arenas of finished runs, for the next: a fresh one pays a page fault per 4 KiB
        # (112 MB, 12 ms, for the LSTM LM); a run writes what it reads, as on the GPU
        self.arenas: list[np.ndarray] = []

    def run(
        self,
        *,
        args: tuple[np.ndarray, ...] | list[np.ndarray] = (),
        feeders: Mapping[str, Any] | None = None,
        receivers: Mapping[str, Callable[..., None]] | None = None,
        params: dict[str, np.ndarray] | None = None,
        entry: str = "main",
        check_finite: bool = False,
        profile: tuple[int, int] | None = None,
    ) -> RunResult:
        """Runs the program; the API and the errors are `interpreters.tg.run`'s. `profile`
        (a profiling build only): record the iterations [first, last) of the outermost
        loops into the result's `events`, as `run(profile=(1, 3)).events`."""
        if profile is not None and not self.profile:
            raise GradfuseError(
                "run(profile=...) needs the profiling build: compile_c(module, profile=True)"
            )
        profile = check_window(profile)
        if entry_function(self.module, entry) is not self.main:
            raise GradfuseError(
                f"the c backend compiled @{self.main.sym_name.data}, not @{entry}:"
                " run other entry functions with --backend reference or lowered"
            )
        keys = [callback_key(g) or g.sym_name.data for g in self.globals]
        types = {k: tensor_of(g.type) for k, g in zip(keys, self.globals)}  # type: ignore[arg-type]
        state = RunState(types, dict(feeders or {}), dict(receivers or {}), check_finite)
        hint = " (give it in params=)"
        values = [
            _contiguous(state.start_value(key, params or {}, g.initial_value, types[key], hint))
            for key, g in zip(keys, self.globals)
        ]
        arrays = [
            _contiguous(a, dtype_of(tensor_of(arg.type)))  # type: ignore[arg-type]
            for a, arg in zip(args, self.main.body.block.args)
        ]
        arena = self.arenas.pop() if self.arenas else np.zeros(self.arena_bytes + 64, np.uint8)
        failure: list[BaseException] = []
        sites = self.sites_of_calls

        def guarded(callback: Callable[..., None]) -> Callable[..., int]:
            """`callback` for C: 0 when it returns, 1 when it raises (the error kept)."""

            def call(*args: Any) -> int:
                try:
                    callback(*args)
                    return 0
                except BaseException as err:  # noqa: BLE001 (handed back to Python after C returns)
                    failure.append(err)
                    return 1

            return call

        def feed(index: int, ptr: int) -> None:
            site = sites[index]
            (buffer,) = site.buffers
            buffer.at(ptr)[...] = state.feed(site.key, buffer.tensor, site.position)

        def receive(index: int, ptrs: Any, n: int) -> None:
            site = sites[index]
            got = tuple(np.array(b.at(ptrs[i])) for i, b in enumerate(site.buffers))
            state.receive(site.key, got, site.position)

        last = [v.copy() for v in values] if check_finite else []  # the last finite params

        def check(iteration: int) -> None:
            state.after_iteration(dict(zip(keys, values)))
            for kept, v in zip(last, values):
                kept[...] = v

        feed_cb, receive_cb = FEED(guarded(feed)), RECEIVE(guarded(receive))
        check_cb = CHECK(guarded(check)) if check_finite else CHECK()
        n_results = len(self.main.function_type.outputs.data)
        saved = {k: np.empty_like(values[k]) for ks in self.saved.values() for k in ks}
        ctx = Context(
            (ctypes.c_void_p * max(len(values), 1))(*[v.ctypes.data for v in values]),
            (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays]),
            (ctypes.c_void_p * max(n_results, 1))(),
            arena.ctypes.data,
            feed_cb,
            receive_cb,
            (ctypes.c_void_p * max(len(values), 1))(
                *[saved[k].ctypes.data if k in saved else None for k in range(len(values))]
            ),
            (ctypes.c_long * max(len(values), 1))(*[v.nbytes for v in values]),
            -1,
            0,
            -1,
            world_size(),
            check_cb,
        )
        events = np.zeros(0, dtype=EVENT)  # the default build records nothing
        if self.profile:
            window = profile if profile is not None else (0, 0)
            events = np.zeros(capacity(self.sites, self.loop_trips, window), dtype=EVENT)
            ctx.events, ctx.capacity = events.ctypes.data, len(events)
            ctx.first, ctx.last = window
        lib = self.lib
        with sigint_flag(lambda: lib.gradfuse_sigint(1), lambda: lib.gradfuse_sigint(0)) as came:
            code = lib.gradfuse_main(ctypes.byref(ctx))
        final = dict(zip(keys, values))
        if code == 0:
            try:
                state.after_run(final, bool(self.loops))
            except GradfuseError as err:
                failure.append(err)
                code, ctx.iteration = 1, -1
                for v, kept in zip(values, last):
                    v[...] = kept
        if code == 2 or (code == 0 and came and came[0]):
            raise interrupted(final)  # stopped at an iteration boundary: nothing to undo
        if code != 0:
            err = failure[0] if failure else GradfuseError("the compiled program stopped")
            if ctx.iteration >= 0:  # params as the last finished iteration left them
                for k in self.saved.get(ctx.loop, ()):
                    values[k][...] = saved[k]
                for v, kept in zip(values, last):
                    v[...] = kept
            if isinstance(err, KeyboardInterrupt):  # Ctrl-C inside a callback
                raise interrupted(final, err) from None
            if not isinstance(err, GradfuseError):
                err = GradfuseError(f"{type(err).__name__}: {err}")
            if ctx.iteration >= 0:
                err = in_iteration(err, self.loops[ctx.loop], ctx.iteration, ctx.index)
            err.params = {k: v.copy() for k, v in final.items()}  # type: ignore[attr-defined]
            err.received = state.received  # type: ignore[attr-defined]
            raise err
        results = [
            np.array(HostBuffer.of(t).at(ctx.results[k]))  # type: ignore[arg-type]
            for k, t in enumerate(self.main.function_type.outputs.data)
        ]
        # results may lie in the arena: it serves another run once they are copied (pop
        # and append are atomic, so concurrent runs each get their own; a failed run's
        # arena is dropped)
        self.arenas.append(arena)
        if ctx.count > len(events):
            raise GradfuseError(
                f"the profiling build recorded {ctx.count} events where {len(events)} were"
                " expected (a loop bound that is not constant?): profile fewer steps"
            )
        got = read_events(events, ctx.count, self.sites) if profile is not None else []
        return RunResult(results, final, state.received, got)
