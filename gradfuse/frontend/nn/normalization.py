"""`LayerNorm` with PyTorch's parameters (`weight` ones, `bias` zeros) and semantics.

norm = LayerNorm(64); y = norm(x)    # x: [..., 64]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradfuse.frontend import functional as F
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype
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
        self.weight: Parameter | None = None
        self.bias: Parameter | None = None
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, np.float32))
            if bias:
                self.bias = Parameter(np.zeros(self.normalized_shape, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
