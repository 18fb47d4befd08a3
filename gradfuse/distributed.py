"""Data-parallel training over MPI, with PyTorch's names (`torch.distributed`).

Launch one process per rank with `mpirun -n 2 python train.py` (or `torchrun
--standalone --nproc-per-node 2 train.py`, whose workers hand the run over to mpirun:
`gradfuse.backend.torchrun`); in the script:

    import gradfuse.distributed as dist
    dist.init_process_group()             # rank and world size from mpirun's variables
    model = dist.DistributedDataParallel(model)   # params broadcast from rank 0
    ... loss.backward() ...               # gradients averaged over the ranks: one
                                          # `tg.allreduce` of one flat buffer per backward()

MPI is the engine whatever `backend` names (`"mpi"`, `"gloo"` or `"nccl"` are taken, so
that PyTorch scripts run as written): mpi4py and Open MPI, the extra `gradfuse[mpi]`.
Receivers run on rank 0 only (`receive_on_all_ranks()` changes that), as a training
script's logging does. A rank that raises stops the job: the others end at once
(`MPI_Abort`, naming the rank), where they would otherwise wait at the next all-reduce.
"""

from gradfuse.backend.mpi import (
    ReduceOp,
    World,
    barrier,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
    launched_by,
    receive_on_all_ranks,
    world,
)
from gradfuse.frontend.ddp import DistributedDataParallel, all_reduce

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "get_rank", "get_world_size", "barrier", "all_reduce", "ReduceOp",
    "DistributedDataParallel", "receive_on_all_ranks", "World", "world", "launched_by",
]  # fmt: skip
