"""Activation modules beyond `layers.py`: `GELU`, `LeakyReLU`, `LogSoftmax`, `Dropout`,
`Dropout2d`, `SiLU`, `ELU`, `Softplus`, `Hardtanh`, `PReLU`, `Upsample`, `ReLU6`,
`Hardswish`, `Mish`, `Softsign`, `LogSigmoid` and `Unflatten`.

ff = Sequential(Linear(64, 128), GELU(), Dropout(0.1), Linear(128, 64))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradfuse.frontend import functional as F
from gradfuse.frontend.functional_act import (
    celu,
    elu,
    glu,
    hardswish,
    hardtanh,
    interpolate,
    logsigmoid,
    mish,
    prelu,
    relu6,
    selu,
    silu,
    softmin,
    softplus,
    softsign,
)
from gradfuse.frontend.functional_conv import leaky_relu
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype, legacy_softmax_dim
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


class GELU(Module):
    """`x * Phi(x)`, exact (`tg.erf`) or with PyTorch's tanh approximation.

    `GELU()(x)`, `GELU(approximate="tanh")(x)`
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise error(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """`x` where positive, else `negative_slope * x`, as PyTorch. `LeakyReLU(0.2, True)(x)`

    `inplace=True` gives the same result (gradfuse's tensors are values: the input
    keeps its own).
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class LogSoftmax(Module):
    """Log-softmax along `dim`, with max-subtraction. `LogSoftmax(dim=1)(logits)`"""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, legacy_softmax_dim(self.dim, x.ndim))


class Dropout(Module):
    """While training, zeroes elements with probability `p` and scales the rest by 1/(1-p).

    Records nothing in eval mode (`model.eval()`) or when `p == 0`; each run of the
    traced step draws a new mask (`tg.random` on a counter param). `Dropout(0.1)(h)`;
    `inplace=True` gives the same result (the input keeps its own value).
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        self.inplace = inplace
        if not 0.0 <= p <= 1.0:
            raise error(f"{type(self).__name__}: probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class SiLU(Module):
    """`x * sigmoid(x)` (`F.silu`). `SiLU()(x)`; `inplace=True` gives the same result."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return silu(x)


class ELU(Module):
    """`x` where positive, else `alpha * (exp(x) - 1)` (`F.elu`). `ELU(alpha=1.0)(x)`"""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Softplus(Module):
    """`log(1 + exp(beta * x)) / beta`, linear past `threshold` (`F.softplus`)."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    """`x` clamped to [min_val, max_val], the gradient strictly inside (`F.hardtanh`).
    `min_value` and `max_value` are PyTorch's deprecated names of the two bounds."""

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ):
        super().__init__()
        self.min_val = min_val if min_value is None else min_value
        self.max_val = max_val if max_value is None else max_value
        self.inplace = inplace
        if self.min_val > self.max_val:
            raise error(f"Hardtanh: min_val {self.min_val} must not exceed max_val {self.max_val}")

    def forward(self, x: Tensor) -> Tensor:
        return hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class PReLU(Module):
    """`x` where positive, else a learnt slope times `x` (`F.prelu`): one slope, or one
    a channel (`num_parameters` = C), all `init` to start. `PReLU()(x)`"""

    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype: Any = None
    ):
        super().__init__()
        device_and_dtype("PReLU", device, dtype)
        self.num_parameters = num_parameters
        self.weight = Parameter(np.full(num_parameters, init, np.float32))

    def forward(self, x: Tensor) -> Tensor:
        return prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class Upsample(Module):
    """`F.interpolate` with `mode="nearest"` and whole factors. `Upsample(scale_factor=2)`"""

    def __init__(
        self,
        size: int | tuple[int, ...] | None = None,
        scale_factor: float | tuple[float, ...] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners = align_corners

    def forward(self, x: Tensor) -> Tensor:
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class Dropout2d(Dropout):
    """While training, zeroes whole channels with probability `p` and scales the others by
    1/(1-p) (`F.dropout2d`); records nothing in eval mode. `Dropout2d(0.25)(x)`"""

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout2d(x, self.p, self.training)


class _Elementwise(Module):
    """An activation without parameters: `FN(x)` (`inplace` gives the same result)."""

    FN: Any = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return type(self).FN(x)  # type: ignore[no-any-return]


class ReLU6(_Elementwise):
    """`min(max(x, 0), 6)`. `ReLU6(inplace=True)`"""

    FN = relu6


class Hardswish(_Elementwise):
    """`x * relu6(x + 3) / 6`."""

    FN = hardswish


class Mish(_Elementwise):
    """`x * tanh(softplus(x))`."""

    FN = mish


class Softsign(_Elementwise):
    """`x / (1 + |x|)`."""

    FN = softsign

    def __init__(self) -> None:
        super().__init__()


class LogSigmoid(_Elementwise):
    """`log(sigmoid(x))`, stable."""

    FN = logsigmoid

    def __init__(self) -> None:
        super().__init__()


class Unflatten(Module):
    """Dim `dim` split into `unflattened_size`: `Unflatten(1, (2, 5))` makes [N, 10] [N, 2, 5]."""

    def __init__(self, dim: int, unflattened_size: tuple[int, ...]):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dim % x.ndim
        return x.reshape([*x.shape[:d], *self.unflattened_size, *x.shape[d + 1 :]])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Softmax2d(Module):
    """Softmax over the channels of each position: dim -3 of [N, C, H, W] or [C, H, W]."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise error(f"Softmax2d: expects a tensor of rank 3 or 4, got shape {list(x.shape)}")
        return x.softmax(-3)


class SELU(_Elementwise):
    """`scale * elu(x, alpha)` with SELU's constants (`F.selu`)."""

    FN = selu


class CELU(ELU):
    """`x` where positive, else `alpha * (exp(x / alpha) - 1)` (`F.celu`)."""

    def forward(self, x: Tensor) -> Tensor:
        return celu(x, self.alpha)


class GLU(Module):
    """`a * sigmoid(b)` of the two halves of `dim` (`F.glu`)."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmin(Module):
    """`softmax(-x, dim)` (`F.softmin`)."""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return softmin(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
