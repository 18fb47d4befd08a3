"""Runs a lowered program on a CUDA device: a GPU through PyCUDA, or the emulated one.

The kernels of the `gpu.module` are rendered to CUDA C and loaded once by the device
(`device.Device`: nvcc to a cubin for a GPU, g++ for `emu.EmuDevice`), both cached on
disk. The host function is turned into a list
of actions once: params live on the device for the whole run (`memref.global`),
temporaries in one arena, launches are queued on one stream, and inside loops
every run of launches between host callbacks is captured once as a CUDA graph
and replayed. Feeders fill pinned staging buffers (two per feeder, guarded by
events) that are copied asynchronously; receivers copy back asynchronously and
their callbacks run, in order, once the copies have landed.

    program = CudaProgram(lowered_module, PyCudaDevice())   # or EmuDevice()
    result = program.run(feeders={"x": x}, params={"0.weight": w})
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, gpu, memref, scf
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from gradfuse.backend import runner
from gradfuse.backend.cuda.compiler import cuda_source
from gradfuse.backend.cuda.device import Device
from gradfuse.backend.cuda.profile import ProfiledRun
from gradfuse.backend.run_control import interrupted, sigint_flag
from gradfuse.backend.runner import (
    RunResult,
    RunState,
    callback_key,
    dtype_of,
    host_call,
    tensor_of,
)
from gradfuse.diagnostics import GradfuseError, position_of

Action = Callable[[], None]


@dataclass
class DeviceBuffer:
    """A typed view of device memory: `ptr` bytes, `shape`, `dtype`."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class CudaProgram:
    """A lowered module compiled for `device`; `run` may be called many times."""

    def __init__(self, module: ModuleOp, device: Device):
        self.device, self.module = device, module
        self.kernels = device.load(cuda_source(module), module)
        self.functions: dict[str, Any] = {}
        self.globals = {  # the host's: not the kernels' shared arrays (in the gpu.module)
            op.sym_name.data: op for op in module.ops if isinstance(op, memref.GlobalOp)
        }
        self.main = next(op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks)
        self.externals = {
            op.sym_name.data: callback_key(op)
            for op in module.ops
            if isinstance(op, func.FuncOp) and not op.body.blocks
        }

    def function(self, name: str, arity: int) -> Any:
        if name not in self.functions:
            self.functions[name] = self.kernels.function(name, arity)
        return self.functions[name]

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
        """Runs the program; the API and the errors are `interpreters.tg.run`'s. Ctrl-C stops
        it at the next iteration of the outermost loop (as the c backend: a flag, set by
        a SIGINT handler installed around the run, checked once per iteration) with the
        params of the finished iterations in the `KeyboardInterrupt`. `profile=(first, last)`
        times those iterations into `RunResult.events` (`gradfuse.backend.cuda.profile`)."""
        window = runner.check_window(profile)
        state = (self, feeders or {}, receivers or {}, params or {})
        run = _Run(*state) if window is None else _ProfiledRun(*state, window=window)
        run.state.check_finite = check_finite
        previous = signal.getsignal(signal.SIGINT)

        def install() -> None:
            signal.signal(signal.SIGINT, lambda sig, frame: run.stop.append(True))

        def remove() -> bool:
            signal.signal(signal.SIGINT, previous)
            return bool(run.stop)

        try:
            with sigint_flag(install, remove) as came:
                results = run.execute(list(args))
            if came and came[0]:
                raise interrupted(run.final_params())
        except GradfuseError as err:
            run.settle()
            err.params = run.finished_params()  # type: ignore[attr-defined]
            err.received = run.state.received  # type: ignore[attr-defined]
            raise
        events = run.events() if isinstance(run, _ProfiledRun) else []
        return RunResult(results, run.final_params(), run.state.received, events)


class _Run:
    """One execution: device state, the host actions, callbacks in order."""

    def __init__(self, prog: CudaProgram, feeders, receivers, params):
        device = prog.device
        self.prog, self.device = prog, device
        keys = {name: key for name, op in prog.globals.items() if (key := callback_key(op))}
        types = {keys[n]: tensor_of(op.type) for n, op in prog.globals.items() if n in keys}  # type: ignore[arg-type]
        self.state = RunState(types, dict(feeders), dict(receivers))
        self.stream = device.stream()
        self.env: dict[SSAValue, Any] = {}
        self.owned: dict[str, Any] = {}  # global symbol -> its device allocation
        self.buffers: dict[str, DeviceBuffer] = {}
        self.keys = keys
        self.pending: list[tuple[Any, str, list[np.ndarray], Any]] = []
        self.staging: dict[int, list[tuple[np.ndarray, Any]]] = {}
        self.stop: list[bool] = []  # a SIGINT came (see `CudaProgram.run`)
        for name, op in prog.globals.items():
            ty = op.type
            assert isinstance(ty, MemRefType)
            key = keys.get(name)
            given = params if key is not None else {}
            host = self.state.start_value(key or name, given, op.initial_value, tensor_of(ty))
            buf = device.alloc(host.nbytes, f'param "{key or name}"')
            device.htod(int(buf), np.ascontiguousarray(host))
            self.owned[name] = buf
            self.buffers[name] = DeviceBuffer(int(buf), tuple(ty.get_shape()), host.dtype)

    # --- host program -> actions ------------------------------------------------------

    def execute(self, args: list[np.ndarray]) -> list[np.ndarray]:
        block = self.prog.main.body.block
        for arg, value in zip(block.args, args):
            ty = arg.type
            assert isinstance(ty, MemRefType)
            host = np.ascontiguousarray(value, dtype=dtype_of(tensor_of(ty)))
            buf = self.device.alloc(host.nbytes, f"argument {len(self.env)}")
            self.device.htod(int(buf), host)
            self.env[arg] = DeviceBuffer(int(buf), tuple(ty.get_shape()), host.dtype)
            self.owned[f"arg{len(self.owned)}"] = buf
        for action in self.actions(block, outer=True):
            action()
        self.stream.synchronize()
        self.flush(block_all=True)
        ret = block.last_op
        if not isinstance(ret, func.ReturnOp):
            return []
        return [self.to_host(self.env[value].ptr, self.env[value]) for value in ret.arguments]

    def actions(self, block: Block, outer: bool = False) -> list[Action]:
        """The block's host ops as closures; runs of launches become graph segments."""
        out: list[Action] = []
        launches: list[Action] = []
        for op in block.ops:
            step = self.host_op(op, outer)
            if isinstance(op, gpu.LaunchFuncOp):
                launches.append(step)  # type: ignore[arg-type]
                continue
            if launches:
                out.append(self.segment(launches, captured=not outer))
                launches = []
            if step is not None:
                out.append(step)
        if launches:
            out.append(self.segment(launches, captured=not outer))
        return out

    def segment(self, launches: list[Action], captured: bool) -> Action:
        """Launches in a row; inside a loop, captured once as a CUDA graph and replayed."""
        if not captured:
            return lambda: [launch() for launch in launches] and None  # type: ignore[func-returns-value]
        graph: list[Any] = []

        def run() -> None:
            if not graph:
                try:
                    with self.device.capture(self.stream) as cap:
                        for launch in launches:
                            launch()
                    graph.append(cap.graph)
                except (OSError, AttributeError, RuntimeError):
                    graph.append(None)  # no graphs here: launch one by one
            if graph[0] is None:
                for launch in launches:
                    launch()
            else:
                graph[0].launch(self.stream)

        return run

    def host_op(self, op: Operation, outer: bool) -> Action | None:
        env = self.env
        if isinstance(op, arith.ConstantOp):
            env[op.result] = op.value.value.data  # type: ignore[attr-defined]
        elif isinstance(op, memref.AllocOp):
            nbytes = int(np.prod(op.memref.type.get_shape()))  # type: ignore[attr-defined]
            buf = self.device.alloc(nbytes, "the arena of temporaries")
            self.owned[f"arena{len(self.owned)}"] = buf
            env[op.memref] = DeviceBuffer(int(buf), (nbytes,), np.dtype(np.int8))
        elif isinstance(op, memref.GetGlobalOp):
            env[op.memref] = self.buffers[op.name_.root_reference.data]
        elif isinstance(op, memref.ViewOp):
            base, offset = env[op.source], env[op.byte_shift]
            ty = op.result.type
            assert isinstance(ty, MemRefType)
            env[op.result] = DeviceBuffer(
                base.ptr + offset, tuple(ty.get_shape()), dtype_of(tensor_of(ty))
            )
        elif isinstance(op, gpu.LaunchFuncOp):
            return self.launch(op)
        elif isinstance(op, func.CallOp):
            return self.call(op)
        elif isinstance(op, scf.ForOp):
            return self.loop(op, outer)
        elif not isinstance(op, func.ReturnOp | scf.YieldOp):
            raise GradfuseError(f"cuda: unexpected host op {op.name}", position_of(op.location))
        return None

    def launch(self, op: gpu.LaunchFuncOp) -> Action:
        env = self.env
        name = op.kernel.nested_references.data[-1].data
        grid = (env[op.gridSizeX], env[op.gridSizeY])
        block = (env[op.blockSizeX], env[op.blockSizeY], env[op.blockSizeZ])
        fn = self.prog.function(name, len(op.kernelOperands))
        pointers = [np.uintp(env[a].ptr) for a in op.kernelOperands]
        stream = self.stream
        return lambda: fn.launch(grid, block, stream, pointers)

    def call(self, op: func.CallOp) -> Action:
        key = self.prog.externals.get(op.callee.root_reference.data, "")
        buffers = [self.env[a] for a in op.arguments]
        where = position_of(op.location)
        kind = host_call(op.callee.root_reference.data)
        if kind == "allreduce":
            src, dst = buffers
            n = int(np.prod(dst.shape, dtype=np.int64))
            return lambda: self.allreduce(src.ptr, dst.ptr, n, dst.dtype, key, where)
        if kind == "feeder":
            ty = tensor_of(op.arguments[0].type)  # type: ignore[arg-type]
            return lambda: self.feed(key, ty, buffers[0], where)
        return lambda: self.receive(key, buffers, where)

    def loop(self, op: scf.ForOp, outer: bool) -> Action:
        lo, hi, st = self.env[op.lb], self.env[op.ub], self.env[op.step]
        body = self.actions(op.body.block)

        calls = outer and any(isinstance(o, func.CallOp) for o in op.body.walk())
        check = outer and self.state.check_finite

        def run() -> None:
            for i in range(lo, hi, st):
                if outer and self.stop:  # Ctrl-C: the queued iterations finish, no more
                    self.settle()
                    raise interrupted(self.final_params())
                if outer:
                    self.at_iteration(op, (i - lo) // st)
                if calls or check:  # a callback or a check may fail: keep the params
                    self.save_params()
                try:
                    for action in body:
                        action()
                    if check:
                        self.state.after_iteration(self.final_params())
                except GradfuseError as err:
                    raise GradfuseError(
                        f"{err.message} (in iteration {(i - lo) // st} of the loop)", err.position
                    ) from None
                self.flush()

        return run

    # --- host callbacks ---------------------------------------------------------------

    def allreduce(
        self, src: int, dst: int, count: int, dtype: np.dtype, reduce: str, where: Any
    ) -> None:
        """`tg.allreduce` on the compute stream (NCCL on a GPU, MPI on the emulated one)."""
        try:
            self.device.allreduce(src, dst, count, dtype, reduce, self.stream)
        except GradfuseError as err:
            raise GradfuseError(err.message, err.position or where) from None

    def feed(self, key: str, ty: Any, buf: DeviceBuffer, where: Any) -> None:
        value = self.state.feed(key, ty, where)
        ring = self.staging.setdefault(
            buf.ptr, [(self.device.pinned(buf.shape, buf.dtype), None) for _ in range(2)]
        )
        host, event = ring.pop(0)
        if event is not None:
            event.synchronize()  # the copy that last used this staging buffer is done
        np.copyto(host, value, casting="unsafe")
        self.copy_to_device(buf.ptr, host)
        done = self.device.event()
        done.record(self.stream)
        ring.append((host, done))

    def receive(self, key: str, buffers: list[DeviceBuffer], where: Any) -> None:
        hosts = [self.device.pinned(b.shape, b.dtype) for b in buffers]
        for host, b in zip(hosts, buffers):
            self.device.dtoh_async(host, b.ptr, self.stream)
        done = self.device.event()
        done.record(self.stream)
        self.pending.append((done, key, hosts, where))

    def flush(self, block_all: bool = False) -> None:
        """Calls the receivers whose copies have landed, in order."""
        while self.pending and (block_all or self.pending[0][0].query()):
            done, key, hosts, where = self.pending.pop(0)
            done.synchronize()
            try:
                self.deliver(key, hosts, where)
            except BaseException:  # as on the other backends, no receiver after a failed one
                self.pending.clear()
                raise

    def settle(self) -> None:
        """When the run stops early: the receivers of the copies queued so far are called,
        in order, so that nothing already computed is lost (a synchronous backend has
        called them by then). Should one of them fail, the first error stands."""
        try:
            self.stream.synchronize()
            self.flush(block_all=True)
        except GradfuseError:
            pass

    # --- params back to the host ------------------------------------------------------

    def save_params(self) -> None:
        """Copies every param on the device (queued), into buffers made once."""
        if not hasattr(self, "saved"):
            self.saved = {
                key: (
                    self.device.alloc(self.buffers[name].nbytes, f'the saved copy of "{key}"'),
                    self.buffers[name],
                )
                for name, key in self.keys.items()
            }
        for key, (dst, b) in self.saved.items():
            self.copy_param(key, dst, b)

    def finished_params(self) -> dict[str, np.ndarray]:
        """The params as the last finished iteration left them (or as they are)."""
        self.stream.synchronize()
        if not hasattr(self, "saved"):
            return self.final_params()
        return {key: self.to_host(int(dst), b) for key, (dst, b) in self.saved.items()}

    def final_params(self) -> dict[str, np.ndarray]:
        self.stream.synchronize()
        return {
            key: self.to_host(self.buffers[n].ptr, self.buffers[n]) for n, key in self.keys.items()
        }

    def to_host(self, ptr: Any, like: DeviceBuffer) -> np.ndarray:
        """A copy of the device memory at `ptr`, of `like`'s shape and dtype (synchronous)."""
        host = np.empty(like.shape, like.dtype)
        self.device.dtoh(host, ptr)
        return host

    # --- what a profiled run times (`_ProfiledRun`); plain here ----------------------
    def copy_to_device(self, ptr: int, host: np.ndarray) -> None:
        self.device.htod_async(ptr, host, self.stream)

    def deliver(self, key: str, hosts: list[np.ndarray], where: Any) -> None:
        self.state.receive(key, tuple(np.array(h) for h in hosts), where)

    def copy_param(self, key: str, dst: Any, b: DeviceBuffer) -> None:
        self.device.dtod_async(int(dst), b.ptr, b.nbytes, self.stream)

    def at_iteration(self, loop: scf.ForOp, iteration: int) -> None: ...  # outer, -1: ended


class _ProfiledRun(ProfiledRun, _Run):
    """A run timed by `gradfuse.backend.cuda.profile.ProfiledRun`."""
