"""Collectives in recorded programs: `all_reduce_value` emits `tg.allreduce`, which
`DistributedDataParallel` (gradients) and `SyncBatchNorm` (batch statistics) use:

    %avg = tg.allreduce %flat reduce="mean" : tensor<1234xf32>
"""

from __future__ import annotations

from gradfuse.backend import mpi
from gradfuse.dialects import tg
from gradfuse.frontend.recorder import emit
from gradfuse.frontend.tensor import Tensor


def all_reduce_value(t: Tensor, reduce: str) -> Tensor:
    """A new tensor: `t` reduced over the ranks (`tg.allreduce`, "sum" or "mean")."""
    mpi.world()  # PyTorch's error when there is no process group
    return Tensor(emit(tg.AllReduceOp(t.value, reduce)).result)
