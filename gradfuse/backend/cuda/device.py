"""The device under the CUDA runtime: what `runtime.py` asks of a GPU, and PyCUDA's answer.

Two devices implement `Device`: `PyCudaDevice` (a real GPU through PyCUDA's driver
module and the driver API for graphs) and `gradfuse.backend.cuda.emu.EmuDevice` (the
same CUDA translation unit compiled for the CPU, memory in host arrays). The runtime,
the generated CUDA and the launch configurations are the same for both:

    device = PyCudaDevice()                     # or EmuDevice()
    kernels = device.load(cuda_source(module), module)  # compiled, loaded
    stream = device.stream()
    buf = device.alloc(4 * 256, 'param "w"')    # int(buf) is the device address
    device.htod(int(buf), np.ones(256, np.float32))
    kernels.function("k0", 1).launch((1, 1), (256, 1, 1), stream, [np.uintp(int(buf))])
    with device.capture(stream) as cap:         # recorded, not run
        ...launches...
    cap.graph.launch(stream)                    # runs them
    done = device.event(); done.record(stream); done.synchronize()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend import mpi
from gradfuse.backend.cuda.compiler import compile_cubin
from gradfuse.backend.cuda.memory import device_alloc


class Stream(Protocol):
    """An ordered queue of device work (PyCUDA's `Stream`)."""

    def synchronize(self) -> None: ...


class Event(Protocol):
    """A marker in a stream (PyCUDA's `Event`): done once the stream has reached it."""

    def record(self, stream: Any) -> Any: ...
    def query(self) -> bool: ...
    def synchronize(self) -> Any: ...
    def time_till(self, later: Any) -> float: ...  # milliseconds from this event to `later`


class Kernel(Protocol):
    """A loaded kernel of pointer arguments."""

    def launch(
        self, grid: tuple[int, int], block: tuple[int, int, int], stream: Any, pointers: Sequence
    ) -> None: ...


class Module(Protocol):
    """A loaded translation unit's kernels."""

    def function(self, name: str, arity: int) -> Kernel: ...


class Capture(Protocol):
    """`with device.capture(stream) as cap:` records what is queued; then `cap.graph`
    (None where graphs are not available) replays it with `cap.graph.launch(stream)`."""

    graph: Any

    def __enter__(self) -> Capture: ...
    def __exit__(self, *exc: object) -> None: ...


class Device(Protocol):
    """What the CUDA runtime needs of a device. Addresses are ints; `alloc`'s result
    owns the memory (freed when dropped) and `int()` of it is the address."""

    name: str  # the backend's name: "cuda" or "cuda-emu"

    def load(self, source: str, module: ModuleOp | None) -> Module: ...
    def alloc(self, nbytes: int, what: str) -> Any: ...
    def htod(self, ptr: int, host: np.ndarray) -> None: ...
    def dtoh(self, host: np.ndarray, ptr: int) -> None: ...
    def htod_async(self, ptr: int, host: np.ndarray, stream: Any) -> None: ...
    def dtoh_async(self, host: np.ndarray, ptr: int, stream: Any) -> None: ...
    def dtod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None: ...
    def pinned(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def stream(self) -> Stream: ...
    def event(self) -> Event: ...
    def capture(self, stream: Any) -> Capture: ...
    def allreduce(
        self, src: int, dst: int, count: int, dtype: np.dtype, reduce: str, stream: Any
    ) -> None: ...  # `tg.allreduce` over the ranks, queued on `stream`


class _PyCudaKernel:
    def __init__(self, fn: Any):
        self.fn = fn

    def launch(self, grid: Any, block: Any, stream: Any, pointers: Sequence) -> None:
        self.fn.prepared_async_call(grid, block, stream, *pointers)


class _PyCudaModule:
    def __init__(self, cu_module: Any):
        self.cu_module = cu_module

    def function(self, name: str, arity: int) -> _PyCudaKernel:
        fn = self.cu_module.get_function(name)
        fn.prepare("P" * arity)
        return _PyCudaKernel(fn)


class _NoGraph:
    """A capture where the driver has no graphs: the launches run one by one."""

    graph = None

    def __enter__(self) -> _NoGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class PyCudaDevice:
    """The GPU of this machine through PyCUDA (its primary context)."""

    name = "cuda"

    def __init__(self) -> None:
        import pycuda.autoprimaryctx  # noqa: F401  (the device's primary context)
        import pycuda.driver as drv

        self.drv = drv
        self.nccl: Any = None  # NCCL and its communicator, at the first all-reduce
        self.communicator: Any = None
        major, minor = drv.Context.get_device().compute_capability()
        self.arch = f"sm_{major}{minor}"

    def load(self, source: str, module: ModuleOp | None) -> _PyCudaModule:
        return _PyCudaModule(self.drv.module_from_buffer(compile_cubin(source, self.arch, module)))

    def alloc(self, nbytes: int, what: str) -> Any:
        return device_alloc(self.drv, nbytes, what)

    def htod(self, ptr: int, host: np.ndarray) -> None:
        self.drv.memcpy_htod(ptr, host)

    def dtoh(self, host: np.ndarray, ptr: int) -> None:
        self.drv.memcpy_dtoh(host, ptr)

    def htod_async(self, ptr: int, host: np.ndarray, stream: Any) -> None:
        self.drv.memcpy_htod_async(ptr, host, stream)

    def dtoh_async(self, host: np.ndarray, ptr: int, stream: Any) -> None:
        self.drv.memcpy_dtoh_async(host, ptr, stream)

    def dtod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self.drv.memcpy_dtod_async(dst, src, nbytes, stream)

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self.drv.pagelocked_empty(shape, dtype)

    def stream(self) -> Any:
        return self.drv.Stream()

    def event(self) -> Any:
        return self.drv.Event()

    def capture(self, stream: Any) -> Any:
        from gradfuse.backend.cuda.graphs import Capture

        try:
            return Capture(stream)
        except (OSError, AttributeError):  # no libcuda with graphs: launch one by one
            return _NoGraph()

    def allreduce(
        self, src: int, dst: int, count: int, dtype: np.dtype, reduce: str, stream: Any
    ) -> None:
        """`ncclAllReduce` on `stream` (nccl.py); a copy in a world of one."""
        if not mpi.is_initialized() or mpi.world().size == 1:
            if src != dst:
                self.dtod_async(dst, src, count * dtype.itemsize, stream)
            return
        if self.nccl is None:
            from gradfuse.backend.cuda.nccl import Nccl

            self.nccl = Nccl()
            self.communicator = self.nccl.communicator()
        self.nccl.allreduce(src, dst, count, dtype, reduce, self.communicator, stream.handle)
