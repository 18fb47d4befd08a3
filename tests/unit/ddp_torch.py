"""PyTorch's own DistributedDataParallel on ddp_train.py's `bn` run, for
test_distributed.py: two processes (torch.multiprocessing, the gloo backend), the same
initial state (OUT/init.npz, saved by the gradfuse run), data, steps and optimizer; each
rank's final state in OUT/torch_<rank>.npz.

    python tests/unit/ddp_torch.py OUT
"""

from __future__ import annotations

import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from ddp_train import BATCH, STEPS, model_and_data
from torch import nn


def rank_main(rank: int, size: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback, whatever the hostname resolves to
    dist.init_process_group("gloo", rank=rank, world_size=size)
    torch.set_num_threads(1)
    _, x, y = model_and_data("bn")
    model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Sigmoid(), nn.Linear(32, 4))
    init = np.load(os.path.join(out, "init.npz"))
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per = BATCH // size
    mine = slice(rank * per, (rank + 1) * per)
    for step in range(STEPS):
        opt.zero_grad()
        loss = nn.MSELoss()(model(torch.tensor(x[step, mine])), torch.tensor(y[step, mine]))
        loss.backward()
        opt.step()
    state = {k: v.numpy() for k, v in model.module.state_dict().items()}
    np.savez(os.path.join(out, f"torch_{rank}.npz"), **state)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(rank_main, args=(2, sys.argv[1], free_port()), nprocs=2)
