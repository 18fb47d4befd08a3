"""`BatchNorm1d` and `BatchNorm2d` with PyTorch's arguments, state_dict names and semantics.

In training mode the batch statistics normalise (biased variance) and the running
statistics are updated in place (`tg.assign`, unbiased variance), counting
`num_batches_tracked`; in eval mode (`model.eval()`) the running statistics
normalise. Gradients flow through the batch statistics:

    bn = BatchNorm2d(64)
    sorted(bn.state_dict())  # ['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend import functional_conv as F
from gradfuse.frontend.nn.buffer import Buffer
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


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
            training=use_batch, momentum=momentum, eps=self.eps,
        )  # fmt: skip

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
