"""`LayerNorm`, `GroupNorm` and `InstanceNorm2d` with PyTorch's parameters (`weight`
ones, `bias` zeros) and semantics.

norm = LayerNorm(64); y = norm(x)    # x: [..., 64]
gn = GroupNorm(8, 64); y = gn(x)     # x: [N, 64, H, W]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradfuse.frontend import functional as F
from gradfuse.frontend.functional_norm import group_norm, instance_norm
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype, only
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.tensor import Tensor


class LayerNorm(Module):
    """Normalises the last dims to mean 0 and (biased) variance 1, then scales and shifts.

    `LayerNorm(64, eps=1e-5)(x)` for x of shape [N, L, 64].
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        device_and_dtype("LayerNorm", device, dtype)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(d) for d in shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight, self.bias = affine_parameters(self.normalized_shape, elementwise_affine, bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


def affine_parameters(
    shape: int | tuple[int, ...], affine: bool, bias: bool
) -> tuple[Parameter | None, Parameter | None]:
    """A normalization's `weight` (ones) and `bias` (zeros) of `shape`, as PyTorch makes
    them: none without `affine`, no bias without `bias`."""
    if not affine:
        return None, None
    weight = Parameter(np.ones(shape, np.float32))
    return weight, Parameter(np.zeros(shape, np.float32)) if bias else None


class GroupNorm(Module):
    """`F.group_norm` over `num_groups` groups of `num_channels`, with a `weight` (ones)
    and `bias` (zeros) per channel where `affine`. `GroupNorm(8, 64)(x)`"""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        device_and_dtype("GroupNorm", device, dtype)
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine,
        )  # fmt: skip
        self.weight, self.bias = affine_parameters(num_channels, affine, bias)

    def forward(self, x: Tensor) -> Tensor:
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class InstanceNorm2d(Module):
    """Each sample's channels normalised on their own (`F.instance_norm`), with a
    `weight` and `bias` per channel where `affine` (off by default, as PyTorch);
    `track_running_stats=True` is an error (gradfuse keeps no running statistics)."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ):
        super().__init__()
        device_and_dtype("InstanceNorm2d", device, dtype)
        only("InstanceNorm2d", "track_running_stats", track_running_stats, False)
        self.num_features, self.eps, self.momentum, self.affine = (
            num_features, eps, momentum, affine,
        )  # fmt: skip
        self.weight, self.bias = affine_parameters(num_features, affine, bias)

    def forward(self, x: Tensor) -> Tensor:
        return instance_norm(x, weight=self.weight, bias=self.bias, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, affine={self.affine}"
