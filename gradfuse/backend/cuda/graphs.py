"""CUDA graphs through the driver API (ctypes), which PyCUDA does not wrap.

A run of launches with no host call between them is captured once from a stream
and replayed with one `cuGraphLaunch` per loop iteration:

    with Capture(stream) as cap:
        launch_all()              # recorded, not executed
    cap.graph.launch(stream)      # runs them
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

CAPTURE_MODE_THREAD_LOCAL = 1


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} failed with CUDA error {code}")


class Graph:
    """An instantiated CUDA graph (`cuGraphExec`)."""

    def __init__(self, lib: ctypes.CDLL, graph: ctypes.c_void_p):
        self.lib, self.graph = lib, graph
        self.exec = ctypes.c_void_p()
        _check(
            lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), graph, 0), "cuGraphInstantiate"
        )

    def launch(self, stream: Any) -> None:
        _check(self.lib.cuGraphLaunch(self.exec, ctypes.c_void_p(stream.handle)), "cuGraphLaunch")

    def __del__(self) -> None:
        try:
            self.lib.cuGraphExecDestroy(self.exec)
            self.lib.cuGraphDestroy(self.graph)
        except Exception:  # interpreter shutdown: the driver may be gone
            pass


class Capture:
    """Records what is queued on `stream` inside the `with` block into `graph`."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
        self.graph: Graph | None = None

    def __enter__(self) -> Capture:
        handle = ctypes.c_void_p(self.stream.handle)
        begin = getattr(self.lib, "cuStreamBeginCapture_v2", None) or self.lib.cuStreamBeginCapture
        _check(begin(handle, CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
        return self

    def __exit__(self, *exc: object) -> None:
        raw = ctypes.c_void_p()
        _check(
            self.lib.cuStreamEndCapture(ctypes.c_void_p(self.stream.handle), ctypes.byref(raw)),
            "cuStreamEndCapture",
        )
        if exc[0] is None:
            self.graph = Graph(self.lib, raw)
