"""The emulated CUDA device: `Device` (../device.py) on the CPU, without PyCUDA.

- Memory: host arrays, poisoned (every byte 0xFF), so that a kernel reading memory
  nothing wrote gets NaN (an integer gets -1), as garbage on a GPU would be, but always.
- Modules: the exact CUDA translation unit, compiled by g++ with `cuda_emu.h` (build.py).
- Streams: a worker thread per stream runs its queue in order (copies, launches, event
  records) while the host goes on, so an async copy reads its host buffer when the
  stream gets to it, as on a GPU. A failure in a kernel is reported, like a CUDA error,
  at the next synchronization (stream, event, synchronous copy), and then sticks.
- Synchronous copies first wait for every stream (the legacy default stream's rule).
- Graphs: capture records the stream's work (launch arguments as they were); a launch
  of the graph queues it all again.

    device = EmuDevice()
    stream = device.stream()
    buf = device.alloc(16, "x")                # 16 bytes of 0xFF: four NaN floats
    device.htod_async(int(buf), np.zeros(4, np.float32), stream)
    stream.synchronize()
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend import mpi
from gradfuse.backend.cuda.emu.build import build_emulated, kernels_of, mode
from gradfuse.backend.cuda.memory import human
from gradfuse.diagnostics import GradfuseError

Work = Callable[[], None]


class EmuError(GradfuseError):
    """A failure on the emulated device (a kernel's, a copy's), reported at a sync."""


class _Queue:
    """A stream's state, shared with its worker thread (which must not keep the stream
    alive: the worker ends when the stream is collected)."""

    def __init__(self) -> None:
        self.work: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self.cond = threading.Condition()
        self.queued = self.finished = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        while (item := self.work.get()) is not None:
            self.do(item)

    def do(self, item: Work) -> None:
        try:
            if self.error is None:  # after a failure, nothing more runs (sticky)
                item()
        except BaseException as err:  # reported at the next synchronization
            self.error = err
        with self.cond:
            self.finished += 1
            self.cond.notify_all()

    def wait(self, upto: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.finished >= upto)
        if self.error is not None:
            raise self.error


class EmuStream:
    """A stream of the emulated device: its work runs in order on a thread of its own, or
    at once on the caller's where the device is `synchronous`."""

    def __init__(self, device: EmuDevice):
        self.q = _Queue()
        self.capturing: list[Work] | None = None
        self.synchronous = device.synchronous
        if not self.synchronous:
            threading.Thread(target=self.q.run, daemon=True, name="cuda-emu stream").start()
            weakref.finalize(self, self.q.work.put, None)
        device.streams.add(self)

    def put(self, work: Work) -> int:
        """Queues `work` (or records it, while captured); its place in the queue."""
        if self.capturing is not None:
            self.capturing.append(work)
            return self.q.queued
        self.q.queued += 1
        if self.synchronous:
            self.q.do(work)
        else:
            self.q.work.put(work)
        return self.q.queued

    def synchronize(self) -> None:
        self.q.wait(self.q.queued)


class EmuEvent:
    """An event: done once its stream has run what was queued before its `record`."""

    def __init__(self) -> None:
        self.stream: EmuStream | None = None
        self.place = 0
        self.at = 0.0  # perf_counter seconds when the stream reached it

    def record(self, stream: EmuStream) -> EmuEvent:
        def reached() -> None:
            self.at = time.perf_counter()

        self.stream, self.place = stream, stream.put(reached)
        return self

    def query(self) -> bool:
        return self.stream is None or self.stream.q.finished >= self.place

    def synchronize(self) -> EmuEvent:
        if self.stream is not None:
            self.stream.q.wait(self.place)
        return self

    def time_till(self, later: EmuEvent) -> float:
        return (later.at - self.at) * 1e3


class EmuKernel:
    """One kernel of a loaded library: a launch queues the whole grid on the stream."""

    def __init__(self, lib: ctypes.CDLL, name: str, barriers: bool, workers: int):
        self.name, self.barriers, self.workers = name, barriers, workers
        self.entry = ctypes.cast(getattr(lib, f"gf_tramp_{name}"), ctypes.c_void_p)
        self.run_grid = lib.gf_emu_launch

    def launch(self, grid: Sequence[int], block: Sequence[int], stream: EmuStream, pointers):
        args = (ctypes.c_void_p * max(len(pointers), 1))(*[int(p) for p in pointers])
        dims = (ctypes.c_uint * 3)(*grid, *([1] * (3 - len(grid))))
        threads = (ctypes.c_uint * 3)(*block, *([1] * (3 - len(block))))
        if min(dims) < 1 or min(threads) < 1 or threads[0] * threads[1] * threads[2] > 1024:
            raise EmuError(f"cuda-emu: kernel {self.name}: invalid launch {tuple(grid)} x {block}")

        def run() -> None:
            error = ctypes.create_string_buffer(256)
            if self.run_grid(
                self.entry, args, dims, threads, self.workers, self.barriers, error, 256
            ):
                raise EmuError(f"cuda-emu: kernel {self.name} failed: {error.value.decode()}")

        stream.put(run)


class EmuModule:
    """A translation unit compiled for the emulated device and loaded."""

    def __init__(
        self,
        source: str,
        module: ModuleOp | None,
        kind: str,
        workers: int,
        library: Path | None = None,
    ):
        """`library`: a build of `source` to load instead of the cached one."""
        self.lib = ctypes.CDLL(str(library or build_emulated(source, kind, module)))
        fn = self.lib.gf_emu_launch
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        fn.argtypes += [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.barriers = kernels_of(source)
        self.workers = workers

    def function(self, name: str, arity: int) -> EmuKernel:
        if name not in self.barriers:
            raise EmuError(f"cuda-emu: the module has no kernel {name}")
        return EmuKernel(self.lib, name, self.barriers[name], self.workers)


class EmuCapture:
    """Stream capture: what is queued inside the `with` is recorded into `graph`."""

    def __init__(self, stream: EmuStream):
        self.stream = stream
        self.graph: EmuGraph | None = None

    def __enter__(self) -> EmuCapture:
        if self.stream.capturing is not None:
            raise EmuError("cuda-emu: the stream is being captured already")
        self.stream.capturing = []
        return self

    def __exit__(self, *exc: object) -> None:
        recorded, self.stream.capturing = self.stream.capturing, None
        if exc[0] is None:
            self.graph = EmuGraph(recorded or [])


class EmuGraph:
    """An instantiated graph: its launch queues the recorded work again, in order."""

    def __init__(self, work: list[Work]):
        self.work = work

    def launch(self, stream: EmuStream) -> None:
        for item in self.work:
            stream.put(item)


class EmuDevice:
    """The emulated device (see the module docstring). `kind`: a mode of build.MODES
    (default $GRADFUSE_CUDA_EMU); `workers`: OS threads running blocks (default: the
    cores); `synchronous` (default: $CUDA_LAUNCH_BLOCKING=1, as for a GPU): every queued
    copy and launch runs at once, on the caller's thread."""

    name = "cuda-emu"
    arch = "emulated"

    def __init__(
        self, kind: str | None = None, workers: int | None = None, synchronous: bool | None = None
    ):
        if synchronous is None:
            synchronous = os.environ.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0")
        self.kind, self.synchronous = kind or mode(), synchronous
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        self.workers = workers or cores or 1
        self.streams: weakref.WeakSet[EmuStream] = weakref.WeakSet()

    def load(self, source: str, module: ModuleOp | None) -> EmuModule:
        return EmuModule(source, module, self.kind, self.workers)

    def alloc(self, nbytes: int, what: str) -> _Allocation:
        try:
            block = np.full(max(nbytes, 1) + 256, 0xFF, np.uint8)  # poisoned
        except MemoryError:
            raise GradfuseError(
                f"the emulated device is out of memory: {what} needs {human(nbytes)}"
            ) from None
        return _Allocation(block)

    def wait_all(self) -> None:
        for stream in list(self.streams):
            stream.synchronize()

    def htod(self, ptr: int, host: np.ndarray) -> None:
        self.wait_all()
        data = np.ascontiguousarray(host)
        ctypes.memmove(ptr, data.ctypes.data, data.nbytes)

    def dtoh(self, host: np.ndarray, ptr: int) -> None:
        self.wait_all()
        ctypes.memmove(host.ctypes.data, ptr, host.nbytes)

    def htod_async(self, ptr: int, host: np.ndarray, stream: EmuStream) -> None:
        stream.put(lambda: ctypes.memmove(ptr, host.ctypes.data, host.nbytes) and None)

    def dtoh_async(self, host: np.ndarray, ptr: int, stream: EmuStream) -> None:
        stream.put(lambda: ctypes.memmove(host.ctypes.data, ptr, host.nbytes) and None)

    def dtod_async(self, dst: int, src: int, nbytes: int, stream: EmuStream) -> None:
        stream.put(lambda: ctypes.memmove(dst, src, nbytes) and None)

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def stream(self) -> EmuStream:
        return EmuStream(self)

    def event(self) -> EmuEvent:
        return EmuEvent()

    def allreduce(
        self, src: int, dst: int, count: int, dtype: np.dtype, reduce: str, stream: EmuStream
    ) -> None:
        """`tg.allreduce` in stream order: MPI over the ranks on the emulated device's
        host memory (`mpi.allreduce_array`, a copy in a world of one), where a GPU
        would run `ncclAllReduce` on the stream."""
        nbytes = count * dtype.itemsize

        def view(ptr: int) -> np.ndarray:
            return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype)

        stream.put(lambda: mpi.allreduce_array(view(src), view(dst), reduce))

    def capture(self, stream: EmuStream) -> EmuCapture:
        return EmuCapture(stream)


class _Allocation:
    """Device memory: a poisoned host array, 256-byte aligned as cudaMalloc's; `int()` is
    its address."""

    def __init__(self, block: np.ndarray):
        self.block = block
        base = block.ctypes.data
        self.ptr = base + (-base % 256)

    def __int__(self) -> int:
        return self.ptr

    def __index__(self) -> int:
        return self.ptr
