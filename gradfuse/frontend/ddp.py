"""`DistributedDataParallel` and `all_reduce`: the recording side of `gradfuse.distributed`.

    model = DistributedDataParallel(model)  # every rank starts from rank 0's params
    model(x).backward()                     # each backward(): the new gradients of the
                                            # model's params, flattened into one buffer,
                                            # one `tg.allreduce reduce="mean"`, split back

The gradients of one `backward()` go in one flat buffer (PyTorch's DDP buckets them;
one bucket here, so one all-reduce a backward), per element type:

    %flat = tg.concat %g0, %g1, ... dim=0 : tensor<Nxf32>   (each gradient reshaped to 1-d)
    %avg = tg.allreduce %flat reduce="mean" : tensor<Nxf32>
    %g0r = tg.slice %avg ...                                (and reshaped back)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from gradfuse.backend import mpi
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.collective import all_reduce_value
from gradfuse.frontend.functional import cat, constant
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.tensor import Tensor


def all_reduce(tensor: Tensor, op: str = "sum", group: Any = None, async_op: bool = False) -> None:
    """Reduces `tensor` over the ranks in place, as `torch.distributed.all_reduce`:
    from here on `tensor` is the sum (or, with `op=ReduceOp.AVG`, the mean) of every
    rank's value. `dist.all_reduce(loss, op=dist.ReduceOp.AVG)`"""
    if group is not None or async_op:
        raise GradfuseError("all_reduce: group= and async_op=True are not supported")
    if isinstance(tensor, Parameter):
        raise GradfuseError(
            "all_reduce: a parameter cannot be reduced in place; reduce a tensor computed"
            " from it, or use DistributedDataParallel for gradients"
        )
    if op not in ("sum", "mean"):
        raise GradfuseError(f'all_reduce: op "{op}" is not one of ReduceOp.SUM, ReduceOp.AVG')
    tensor._value = all_reduce_value(tensor, op).value


OPTIONS = (
    "output_device", "find_unused_parameters", "bucket_cap_mb", "gradient_as_bucket_view",
    "static_graph",
)  # fmt: skip
"""PyTorch's DDP options that a script may pass, about devices and buckets: nothing to
do with one flat buffer on MPI."""


class DistributedDataParallel(Module):
    """Data-parallel training of `module`: every rank holds the whole model and trains it
    on its own part of each batch. The params (and buffers) are broadcast from rank 0
    when it is built, and each `backward()` through it averages the new gradients over
    the ranks before they reach `.grad`, so that every rank's optimizer takes the same
    step. `model = DistributedDataParallel(model); model(x).sum().backward()`"""

    def __init__(
        self,
        module: Module,
        device_ids: Sequence[int] | None = None,
        broadcast_buffers: bool = True,
        **options: Any,
    ) -> None:
        world = mpi.world()
        super().__init__()
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.syncing = True  # off inside `no_sync()`
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise GradfuseError(f"DistributedDataParallel: no option {', '.join(unknown)}")
        entries = [p.host for p in module.parameters()] + [b.host for b in module.buffers()]
        if world.size > 1:
            mpi.broadcast_arrays(iter(entries))
        for p in module.parameters():
            p._reducer = self.reduce

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.broadcast_buffers and mpi.world().size > 1:
            self.sync_buffers()
        return self.module(*args, **kwargs)

    def sync_buffers(self) -> None:
        """Every rank's buffers become rank 0's, as PyTorch's DDP broadcasts them at the
        start of each forward (`broadcast_buffers=True`): per element type, one flat
        buffer that rank 0 fills and the others leave 0, summed by one all-reduce. Then
        each rank's forward updates them (a batch norm's running statistics) from its
        own batch, as in PyTorch."""
        buffers = [b for b in self.module.buffers() if b.numel()]
        for k, value in all_reduce_flat(buffers, "sum", contribute=mpi.world().rank == 0):
            buffers[k].assign(value)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside, `backward()` through the model accumulates each rank's gradients in
        `.grad` without an all-reduce; the first `backward()` after it averages the
        accumulated `.grad`, as PyTorch's `no_sync()` (gradient accumulation):

            with model.no_sync():
                loss_fn(model(x1), y1).backward()   # local
            loss_fn(model(x2), y2).backward()       # the sum of both, averaged
        """
        before, self.syncing = self.syncing, False
        try:
            yield
        finally:
            self.syncing = before

    def reduce(self, fresh: list[tuple[Parameter, Tensor]]) -> list[tuple[Parameter, Tensor]]:
        """The gradients after one `backward()` (what `.grad` held plus the new ones)
        with this model's averaged over the ranks: one flat all-reduce per element type;
        unchanged inside `no_sync()`."""
        if not self.syncing:
            return fresh
        out = list(fresh)
        mine = [i for i, (p, _) in enumerate(fresh) if p._reducer == self.reduce]
        for k, mean in all_reduce_flat([fresh[i][1] for i in mine], "mean"):
            out[mine[k]] = (fresh[mine[k]][0], mean)
        return out


def all_reduce_flat(
    tensors: Sequence[Tensor], reduce: str, contribute: bool = True
) -> Iterator[tuple[int, Tensor]]:
    """`tensors` reduced over the ranks through one flat buffer per element type
    (`tg.concat`, one `tg.allreduce`, slices): each (index, reduced tensor of its shape)
    as its slice is made. A rank that does not `contribute` puts zeros in (a broadcast
    from the one that does, by a sum)."""
    by_type: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        by_type.setdefault(t.value.type.element_type, []).append(i)  # type: ignore[attr-defined]
    for indices in by_type.values():
        parts = [tensors[i] for i in indices]
        flat = cat([t.reshape(-1) for t in parts]) if len(parts) > 1 else parts[0].reshape(-1)
        if not contribute:
            flat = constant(np.zeros(flat.numel()), flat.dtype)
        total = all_reduce_value(flat, reduce)
        start = 0
        for i, t in zip(indices, parts):
            n = t.numel()
            yield i, total[start : start + n].reshape(t.shape)
            start += n
