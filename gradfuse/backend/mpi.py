"""The ranks of a data-parallel run: the MPI world that `gradfuse.distributed` joins,
and the host side of `tg.allreduce` (mpi4py) for the backends that run it in Python.

    init_process_group()          # World(rank=0, size=2, local_rank=0, comm, "mpirun")
    allreduce_array(x, out, "mean")
    receives_here()               # rank 0 (or every rank when asked): call receivers

No process group (a single process, `init_process_group` not called) is a world of one:
`tg.allreduce` is then the identity.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from gradfuse.backend.torchrun import RELAUNCHED, hand_over
from gradfuse.diagnostics import GradfuseError

INSTALL = (
    "gradfuse.distributed needs MPI: pip install 'gradfuse[mpi]' (mpi4py and Open MPI),"
    " then launch with mpirun -n N python script.py"
)
BACKENDS = ("mpi", "gloo", "nccl", "cpu:gloo,cuda:nccl")
"""Backend names taken from PyTorch scripts; MPI runs each of them."""


class ReduceOp:
    """`dist.ReduceOp.SUM` and `AVG`, as PyTorch names them (`tg.allreduce`'s reduce)."""

    SUM = "sum"
    AVG = "mean"


@dataclass(frozen=True)
class World:
    """The run's ranks: this process's rank, their number, its rank on its node, the
    MPI communicator and what launched it (`mpirun`, `torchrun` or `python`)."""

    rank: int
    size: int
    local_rank: int
    comm: Any
    launcher: str


_world: World | None = None
_all_ranks_receive = False


LAUNCHERS = (
    ("mpirun", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")),
    ("mpirun", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")),  # MPICH's
    ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK")),
)
"""Each launcher's variables for the rank, the world size and the rank on the node."""


def launched_by(env: os._Environ[str] | dict[str, str] = os.environ) -> tuple[str, int, int, int]:
    """(launcher, rank, world size, local rank) from the first launcher of `LAUNCHERS`
    whose rank and size variables are set, else a single process (`python`)."""
    for launcher, keys in LAUNCHERS:
        if keys[0] in env and keys[1] in env:
            rank, size, local = (int(env.get(k, "0")) for k in keys)
            return launcher, rank, size, local
    return ("python", 0, 1, 0)


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: Any = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any = None,
    group_name: str = "",
    pg_options: Any = None,
    device_id: Any = None,
) -> None:
    """Joins this process to the run's MPI world (`MPI_COMM_WORLD`); the rank and world
    size come from the launcher (`launched_by`), and a `world_size` or `rank` given must
    agree with them (PyTorch's rendezvous arguments, `init_method`, `store` and the
    rest, have nothing to do: mpirun has joined the ranks). `dist.init_process_group("nccl")`

    Under torchrun (one node), the workers hand the run over to mpirun
    (`gradfuse.backend.torchrun.hand_over`): worker 0 starts the ranks again under
    mpirun and ends with their status, the others end here."""
    global _world
    if _world is not None:
        raise GradfuseError(
            "init_process_group: the default process group is already initialized"
            " (call destroy_process_group() first)"
        )
    if backend is not None and backend not in BACKENDS:
        raise GradfuseError(
            f'init_process_group: backend "{backend}" is not one gradfuse runs'
            f" (MPI runs {', '.join(BACKENDS)})"
        )
    launcher, env_rank, env_size, local = launched_by()
    if not is_available():
        raise GradfuseError(INSTALL)
    if launcher == "torchrun" and env_size > 1:
        hand_over(env_rank, env_size, INSTALL)  # ends this worker; mpirun runs the ranks
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if os.environ.get(RELAUNCHED) == "1":
        launcher = "torchrun"  # its ranks, started again by mpirun (`gradfuse.backend.torchrun`)
    if env_size != comm.Get_size():
        script = " ".join(shlex.quote(a) for a in sys.argv) or "script.py"
        raise GradfuseError(
            f"init_process_group: {launcher} started {env_size} processes, but MPI joined"
            f" {comm.Get_size()}: each process started without mpirun is an MPI world of its"
            f" own (Open MPI joins only the processes one mpirun starts); launch with"
            f" mpirun -n {env_size} python {script}"
        )
    for given, found, what in (
        (world_size, env_size, "world_size"),
        (rank, comm.Get_rank(), "rank"),
    ):
        if given not in (-1, found):
            raise GradfuseError(
                f"init_process_group: {what}={given}, but the launcher gave {found}"
            )
    _world = World(comm.Get_rank(), comm.Get_size(), local, comm, launcher)
    if env_rank != _world.rank:
        raise GradfuseError(
            f"init_process_group: {launcher} gave rank {env_rank}, MPI {_world.rank}"
        )
    if _world.size > 1:
        _abort_on_failure(_world)


def _abort_on_failure(world: World) -> None:
    """An uncaught error on this rank ends every rank (`MPI_Abort`) after saying which
    rank failed: the others would wait for it at the next all-reduce."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
        previous(kind, err, tb)
        sys.stderr.write(
            f"gradfuse.distributed: rank {world.rank} of {world.size} failed"
            f" ({kind.__name__}: {err}); stopping every rank\n"
        )
        sys.stderr.flush()
        world.comm.Abort(1)

    sys.excepthook = hook


def destroy_process_group() -> None:
    """Leaves the process group (MPI itself stays up until the process ends)."""
    global _world
    _world = None


def is_initialized() -> bool:
    return _world is not None


def is_available() -> bool:
    """Whether MPI (mpi4py) can be imported here."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def world() -> World:
    """The initialized world, else PyTorch's error."""
    if _world is None:
        raise GradfuseError(
            "Default process group has not been initialized, please make sure to call"
            " init_process_group()"
        )
    return _world


def get_rank() -> int:
    return world().rank


def get_world_size() -> int:
    return world().size


def barrier() -> None:
    """Waits for every rank (on the host, now: not a recorded op)."""
    world().comm.Barrier()


def world_size() -> int:
    """The process group's size, 1 where there is none (the compiled programs' `ranks`)."""
    return 1 if _world is None else _world.size


def receive_on_all_ranks(on: bool = True) -> None:
    """Receivers call their callbacks on every rank (`on`), not on rank 0 only."""
    global _all_ranks_receive
    _all_ranks_receive = on


def receives_here() -> bool:
    """Whether this process calls receivers' callbacks: rank 0, or every rank when asked."""
    return _world is None or _world.rank == 0 or _all_ranks_receive


def allreduce_array(source: np.ndarray, target: np.ndarray, reduce: str) -> None:
    """`tg.allreduce` on host arrays (the reference and numpy backends): `target` gets the
    sum (or mean) over the ranks of `source`; with no world (a single process, no
    `init_process_group`), `source` itself."""
    if _world is None or _world.size == 1:
        target[...] = source
        return
    from mpi4py import MPI

    if np.shares_memory(source, target):  # MPI reads and writes one buffer only in place
        target[...] = source
        _world.comm.Allreduce(MPI.IN_PLACE, target, op=MPI.SUM)
    else:
        _world.comm.Allreduce(np.ascontiguousarray(source), target, op=MPI.SUM)
    if reduce == "mean":
        target /= target.dtype.type(_world.size)


def broadcast_arrays(arrays: Iterator[np.ndarray], root: int = 0) -> None:
    """Every rank's `arrays` (in place) become rank `root`'s."""
    comm = world().comm
    for a in arrays:
        comm.Bcast(a, root=root)
