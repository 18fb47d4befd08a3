"""`tg.allreduce` on a GPU: `ncclAllReduce` on the compute stream, through ctypes.

NCCL comes from the `nvidia-nccl-cu13` wheel (or the system's `libnccl.so.2`). The
communicator is made once per process group: rank 0 draws an `ncclUniqueId`, MPI
broadcasts it (the ranks are an MPI world, `gradfuse.distributed`), and every rank
calls `ncclCommInitRank`. Then each all-reduce is queued on the stream the kernels run
on, so that it follows the backward's kernels and precedes the optimizer's, as the
kernel-IR call stands between them:

    func.call @gradfuse_allreduce_0(%flat, %flat) {gradfuse.key = "mean"}
    -> ncclAllReduce(flat, flat, n, ncclFloat32, ncclAvg, comm, stream)
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from gradfuse.backend import mpi
from gradfuse.diagnostics import GradfuseError

TYPES = {np.dtype(np.float32): 7, np.dtype(np.float64): 8}
"""`ncclDataType_t`: ncclFloat32, ncclFloat64 (nccl.h)."""
OPS = {"sum": 0, "mean": 4}
"""`ncclRedOp_t`: ncclSum, ncclAvg (nccl.h, NCCL 2.10 and later)."""
INSTALL = "tg.allreduce on the cuda backend needs NCCL: pip install nvidia-nccl-cu13"


class UniqueId(ctypes.Structure):
    """`ncclUniqueId`: 128 opaque bytes that name one communicator."""

    _fields_ = [("internal", ctypes.c_char * 128)]


def library() -> ctypes.CDLL:
    """libnccl.so.2: the wheel's, else the system's; one sentence when there is none."""
    candidates = []
    try:
        import nvidia.nccl  # the nvidia-nccl-cu13 wheel

        candidates.append(str(Path(list(nvidia.nccl.__path__)[0]) / "lib" / "libnccl.so.2"))
    except ImportError:
        pass
    for name in [*candidates, "libnccl.so.2"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise GradfuseError(INSTALL)


class Nccl:
    """NCCL's entry points that gradfuse calls, checked: a failure raises its message."""

    def __init__(self, lib: ctypes.CDLL | None = None) -> None:
        self.lib = lib or library()
        self.lib.ncclGetErrorString.restype = ctypes.c_char_p
        self.lib.ncclCommInitRank.argtypes = [
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int,
        ]  # fmt: skip
        self.lib.ncclAllReduce.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip

    def check(self, result: int, what: str) -> None:
        if result != 0:
            message = self.lib.ncclGetErrorString(result).decode()
            raise GradfuseError(f"{what} failed: {message} (NCCL error {result})")

    def unique_id(self) -> UniqueId:
        """A new `ncclUniqueId` (needs no GPU)."""
        uid = UniqueId()
        self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return uid

    def communicator(self) -> ctypes.c_void_p:
        """This rank's communicator over the MPI world: rank 0's id, broadcast by MPI."""
        world = mpi.world()
        raw = bytes(self.unique_id()) if world.rank == 0 else None  # all 128 bytes
        uid = UniqueId.from_buffer_copy(world.comm.bcast(raw, root=0))
        comm = ctypes.c_void_p()
        self.check(
            self.lib.ncclCommInitRank(ctypes.byref(comm), world.size, uid, world.rank),
            "ncclCommInitRank",
        )
        return comm

    def allreduce(
        self, src: int, dst: int, count: int, dtype: np.dtype, reduce: str, comm: Any, stream: int
    ) -> None:
        """Queues `ncclAllReduce(src, dst, count, ...)` on `stream` (a CUstream handle)."""
        if dtype not in TYPES:
            raise GradfuseError(f"tg.allreduce of {dtype} has no NCCL type (f32 or f64)")
        result = self.lib.ncclAllReduce(
            src, dst, count, TYPES[dtype], OPS[reduce], comm, ctypes.c_void_p(stream)
        )
        self.check(result, "ncclAllReduce")
