"""PyTorch's activations, `pad` and `interpolate` beyond `functional.py` and
`functional_conv.py`, as composites of tg ops, each with PyTorch's values and gradient
(at the kinks too):

    F.silu(x)                # x * sigmoid(x)
    F.elu(x, alpha=1.0)      # x where x > 0, else alpha * (exp(x) - 1)
    F.softplus(x, beta=1.0, threshold=20.0)
    F.hardtanh(x, -1.0, 1.0) # the gradient passes strictly between the bounds
    F.pad(x, (1, 1, 2, 0))   # the last dim by 1 and 1, the one before by 2 and 0
    F.prelu(x, w)            # x where x > 0, else w * x (w: 1 slope or one a channel)
    F.interpolate(x, scale_factor=2)   # nearest, whole factors: each element repeated
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gradfuse.dialects.tg_builder import element_type
from gradfuse.frontend.nn.options import legacy_softmax_dim
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where
from gradfuse.frontend.tensor_shape import copies, per_channel


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """`x * sigmoid(x)` (`inplace=True` gives the same result: the input keeps its own)."""
    return input * input.sigmoid()


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """`x` where `x > 0`, else `alpha * (exp(x) - 1)` (`tg.expm1` of `min(x, 0)`, so the
    branch not taken stays finite); the gradient at 0 is `alpha`, as PyTorch's."""
    negative = input.clamp(max=0.0).expm1() * alpha
    return where(input > 0.0, input, negative)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """`log(1 + exp(beta * x)) / beta`, and `x` where `beta * x > threshold`, as PyTorch
    (the exponent is capped at `threshold`, so the branch not taken stays finite)."""
    scaled = input * beta
    smooth = scaled.clamp(max=threshold).exp().log1p() * (1.0 / beta)
    return where(scaled > threshold, input, smooth)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """`x` clamped to [min_val, max_val]; unlike `clamp`, the gradient passes only strictly
    between the bounds, as PyTorch's `hardtanh`."""
    if min_val > max_val:
        raise error(f"hardtanh: min_val {min_val} must not exceed max_val {max_val}")
    return where(input <= min_val, min_val, where(input >= max_val, max_val, input))


def pad(
    input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None
) -> Tensor:
    """`input` padded with `value` (0): `pad` holds (before, after) pairs from the last
    dim backwards, as PyTorch's `F.pad` (`tg.pad`); modes "reflect", "replicate" and
    "circular" gather (`functional_spatial.gathered_pad`). No negative pads (cropping:
    slice instead)."""
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise error(
            f"pad: needs (before, after) pairs for at most {input.ndim} dims, got {list(pad)}"
        )
    if mode != "constant":
        from gradfuse.frontend.functional_spatial import gathered_pad  # (it imports this)

        return gathered_pad(input, pad, mode)
    if any(p < 0 for p in pad):
        raise error(f"pad: negative pads are not supported, got {list(pad)} (slice instead)")
    low, high = [0] * input.ndim, [0] * input.ndim
    for k in range(len(pad) // 2):
        low[input.ndim - 1 - k], high[input.ndim - 1 - k] = pad[2 * k], pad[2 * k + 1]
    return input._new(B.pad(input.value, low, high, 0.0 if value is None else float(value)))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """`x` where `x > 0`, else `weight * x`: one slope (`weight` [1]) or one a channel
    (`weight` [C], along dim 1), as PyTorch's `prelu`."""
    if weight.ndim != 1 or (
        weight.shape[0] != 1 and (input.ndim < 2 or weight.shape[0] != input.shape[1])
    ):
        raise error(
            f"prelu: weight {list(weight.shape)} must hold 1 slope or one a channel of the"
            f" input {list(input.shape)}"
        )
    slope = weight if weight.shape[0] == 1 else per_channel(weight, input.ndim)
    return where(input > 0.0, input, input * slope)


def interpolate(
    input: Tensor,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """`input` [N, C, *spatial] resized by `scale_factor` or to `size`, as PyTorch's
    `F.interpolate` with `mode="nearest"` and whole factors: each element repeated
    factor times along each spatial dim (a `tg.broadcast`), its gradient the sum over
    its copies. `F.interpolate(x, scale_factor=2)`"""
    if mode != "nearest" or align_corners is not None or antialias:
        raise error(f"interpolate: only mode='nearest' is supported, got {mode!r}")
    spatial = list(input.shape[2:])
    if input.ndim < 3 or (size is None) == (scale_factor is None):
        raise error("interpolate: give one of size and scale_factor, for an input [N, C, ...]")
    if size is not None:
        sizes = [size] * len(spatial) if isinstance(size, int) else list(size)
        factors = [s / n for s, n in zip(sizes, spatial)]
    else:
        factors = (
            [float(scale_factor)] * len(spatial)  # type: ignore[arg-type]
            if isinstance(scale_factor, int | float)
            else [float(f) for f in scale_factor]  # type: ignore[union-attr]
        )
    if len(factors) != len(spatial) or any(f < 1 or f != int(f) for f in factors):
        raise error(
            f"interpolate: only whole factors of at least 1 per spatial dim are supported,"
            f" got {factors} for {spatial}"
        )
    return copies(input, [1, 1, *(int(f) for f in factors)], each=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """`min(max(x, 0), 6)` (`hardtanh(x, 0, 6)`)."""
    return hardtanh(input, 0.0, 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """`x * relu6(x + 3) / 6`; its gradient is PyTorch's: 0 up to -3, 1 from 3 on,
    `x / 3 + 1/2` between."""
    inner = input * (input * (1.0 / 6.0) + 0.5)
    return where(input <= -3.0, 0.0, where(input >= 3.0, input, inner))


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """`x * tanh(softplus(x))`."""
    return input * softplus(input).tanh()


def softsign(input: Tensor) -> Tensor:
    """`x / (1 + |x|)`."""
    return input / (input.abs() + 1.0)


def logsigmoid(input: Tensor) -> Tensor:
    """`log(sigmoid(x))`, stable for any x: `min(x, 0) - log1p(exp(-|x|))`, the minimum
    written `(x - |x|) / 2` so that the gradient at 0 is 1/2 (|x|'s there is 0)."""
    magnitude = input.abs()
    return (input - magnitude) * 0.5 - (-magnitude).exp().log1p()


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """`a * sigmoid(b)` of the two halves of `dim`."""
    n = input.shape[B.normalize_dims(dim, input.ndim, "glu")[0]]
    if n % 2:
        raise error(f"glu: dim {dim} has odd size {n}")
    a, b = input.split(n // 2, dim)
    return a * b.sigmoid()


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """`scale * elu(x, alpha)` with SELU's constants."""
    return elu(input, SELU_ALPHA) * SELU_SCALE


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """`x` where `x > 0`, else `alpha * (exp(x / alpha) - 1)`."""
    negative = (input.clamp(max=0.0) * (1.0 / alpha)).expm1() * alpha
    return where(input > 0.0, input, negative)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: object = None) -> Tensor:  # noqa: E501
    """`softmax(-x, dim)` (without `dim`, PyTorch's legacy choice)."""
    return (-input).softmax(legacy_softmax_dim(dim, input.ndim))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """1.0 at each class index of `tensor` (integers held as floats), 0.0 elsewhere, in a
    new last dim of `num_classes` (given: the data decide no shape while tracing)."""
    if num_classes < 1:
        raise error(
            "one_hot: num_classes must be given (a traced tensor's largest index is not"
            " known while the program is recorded)"
        )
    classes = B.dense(np.arange(num_classes), element_type(tensor.value))
    return (tensor.unsqueeze(-1) == Tensor(classes)).float()


__all__ = [
    "elu", "hardtanh", "interpolate", "pad", "prelu", "silu", "softplus", "relu6", "hardswish",
    "mish", "softsign", "logsigmoid", "one_hot", "glu", "selu", "celu", "softmin",
]  # fmt: skip
