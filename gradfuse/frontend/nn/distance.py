"""`CosineSimilarity`, `PairwiseDistance` (`functional_margin.py`) and `Bilinear`, with
PyTorch's arguments and initialisation:

    Bilinear(4, 6, 2)(x1, x2)        # x1^T A_k x2 + b_k: one einsum, [N, 4] x [N, 6] -> [N, 2]
"""

from __future__ import annotations

import math

from gradfuse.frontend import functional_margin as F
from gradfuse.frontend.einsum import einsum
from gradfuse.frontend.nn.layers import uniform
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype
from gradfuse.frontend.tensor import Tensor


class CosineSimilarity(Module):
    """The cosine between x1 and x2 along `dim` (`F.cosine_similarity`)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """The `p`-norm of `x1 - x2 + eps` along the last dim (`F.pairwise_distance`)."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Bilinear(Module):
    """`y_k = x1^T A_k x2 + b_k`: weight [out, in1, in2] and bias [out], both drawn from
    U(-1/sqrt(in1), 1/sqrt(in1)) as PyTorch's."""

    def __init__(
        self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
        device: object = None, dtype: object = None,
    ):  # fmt: skip
        super().__init__()
        device_and_dtype("Bilinear", device, dtype)
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        bound = 1.0 / math.sqrt(in1_features)
        self.weight = uniform(bound, (out_features, in1_features, in2_features))
        self.bias = uniform(bound, (out_features,)) if bias else None

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        y = einsum("...i,kij,...j->...k", x1, self.weight, x2)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features},"
            f" out_features={self.out_features}, bias={self.bias is not None}"
        )
