"""`BatchNorm1d`, `BatchNorm2d` and `SyncBatchNorm` with PyTorch's arguments, state_dict
names and semantics.

In training mode the batch statistics normalise (biased variance) and the running
statistics are updated in place (`tg.assign`, unbiased variance), counting
`num_batches_tracked`; in eval mode (`model.eval()`) the running statistics
normalise. Gradients flow through the batch statistics:

    bn = BatchNorm2d(64)
    sorted(bn.state_dict())  # ['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']

`SyncBatchNorm` takes its batch statistics over every rank's batch (data-parallel
training, `gradfuse.distributed`): each channel's sum and count, then its sum of
squared deviations, are summed over the ranks by `tg.allreduce`, whose derivative
sums the statistics' cotangents over the ranks in the backward pass:

    %s = tg.reduce_sum %x dims=[0, 2, 3] ...; %sc = tg.concat %s, %count ...
    %all = tg.allreduce %sc reduce="sum" : tensor<65xf32>      (64 channels and the count)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradfuse.backend import mpi
from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend import functional_conv as F
from gradfuse.frontend.collective import all_reduce_value
from gradfuse.frontend.functional import cat, constant
from gradfuse.frontend.nn.buffer import Buffer
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor
from gradfuse.frontend.tensor_shape import per_channel


class _BatchNorm(Module):
    """What the batch norms share; subclasses say which input ranks they take."""

    ranks: tuple[int, ...] = ()
    layout = ""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        device_and_dtype(type(self).__name__, device, dtype)
        if num_features < 1:
            raise error(f"{type(self).__name__}: num_features must be positive, got {num_features}")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self.weight = Parameter(np.ones(num_features, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(num_features, np.float32)) if affine and bias else None
        self.running_mean: Buffer | None = None
        self.running_var: Buffer | None = None
        self.num_batches_tracked: Buffer | None = None
        if track_running_stats:
            self.running_mean = Buffer(np.zeros(num_features, np.float32))
            self.running_var = Buffer(np.ones(num_features, np.float32))
            self.num_batches_tracked = Buffer(np.zeros((), np.float32))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.ranks or x.shape[1] != self.num_features:
            raise error(
                f"{type(self).__name__}({self.num_features}): expected an input {self.layout}"
                f" with {self.num_features} channels, got {fmt_shape(x.shape)}"
            )
        use_batch = self.training or self.running_mean is None
        momentum: float | Tensor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.num_batches_tracked is not None:
            count = self.num_batches_tracked + 1.0
            self.num_batches_tracked.assign(count)
            if self.momentum is None:  # a cumulative moving average
                momentum = count.reciprocal()
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias,
            training=use_batch, momentum=momentum, eps=self.eps, batch_mean=self.batch_mean(),
        )  # fmt: skip

    def batch_mean(self) -> F.BatchMean | None:
        """How the batch statistics are taken: over this batch (None, the default)."""
        return None

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum},"
            f" affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm2d(_BatchNorm):
    """Batch norm over N, H, W of an [N, C, H, W] input, per channel C.

    `BatchNorm2d(64)(x)`; `bn.eval()` switches to the running statistics.
    """

    ranks = (4,)
    layout = "[N, C, H, W]"


class BatchNorm1d(_BatchNorm):
    """Batch norm over N (and L) of an [N, C] or [N, C, L] input, per channel C.

    `BatchNorm1d(128)(h)`
    """

    ranks = (2, 3)
    layout = "[N, C] or [N, C, L]"


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose batch statistics cover every rank's batch, as PyTorch's
    `nn.SyncBatchNorm`: two ranks of 4 samples normalise as one batch of 8. Without a
    process group of more than one rank it is a plain batch norm. Usually made by
    `SyncBatchNorm.convert_sync_batchnorm(model)` before `DistributedDataParallel`.
    `SyncBatchNorm(64)(x)` for x [N, 64, ...]
    """

    ranks = (2, 3, 4, 5)
    layout = "[N, C, ...]"

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ):
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )
        if process_group is not None:
            raise error("SyncBatchNorm: process_group= is not supported (the whole world syncs)")

    def batch_mean(self) -> F.BatchMean | None:
        return synced_batch_mean if mpi.is_initialized() and mpi.world().size > 1 else None

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """`module` with every `BatchNorm1d`/`BatchNorm2d` in it replaced by a
        `SyncBatchNorm` that holds the same weight, bias and running statistics (the same
        objects, so an optimizer made before still trains them); `module` itself when
        it is one. `model = SyncBatchNorm.convert_sync_batchnorm(model)`"""
        if process_group is not None:
            raise error("SyncBatchNorm: process_group= is not supported (the whole world syncs)")
        if isinstance(module, BatchNorm1d | BatchNorm2d):
            sync = cls(
                module.num_features, module.eps, module.momentum, module.affine,
                module.track_running_stats,
            )  # fmt: skip
            for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                value = getattr(module, name)
                if value is not None or getattr(sync, name) is not None:
                    setattr(sync, name, value)
            object.__setattr__(sync, "_parent", module._parent)
            object.__setattr__(sync, "_name", module._name)
            sync.train(module.training)
            return sync
        for name, child in list(module.named_children()):
            converted = cls.convert_sync_batchnorm(child)
            if converted is not child:
                setattr(module, name, converted)
        return module


def synced_batch_mean(t: Tensor, dims: list[int]) -> tuple[Tensor, Tensor]:
    """The channel mean of `t` over every rank's batch (keepdim), and the count behind
    it: this rank's channel sums and its count in one buffer, summed by one
    `tg.allreduce` (ranks may hold batches of different sizes)."""
    c = t.shape[1]
    mine = cat([t.sum(dims), constant([float(t.numel() // c)])])
    total = all_reduce_value(mine, "sum")
    count = total[c:]
    return per_channel(total[:c] / count, t.ndim), count
