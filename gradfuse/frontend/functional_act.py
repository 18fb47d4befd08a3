"""PyTorch's activations and `pad` beyond `functional.py` and `functional_conv.py`, as
composites of tg ops, each with PyTorch's values and gradient (at the kinks too):

    F.silu(x)                # x * sigmoid(x)
    F.elu(x, alpha=1.0)      # x where x > 0, else alpha * (exp(x) - 1)
    F.softplus(x, beta=1.0, threshold=20.0)
    F.hardtanh(x, -1.0, 1.0) # the gradient passes strictly between the bounds
    F.pad(x, (1, 1, 2, 0))   # the last dim by 1 and 1, the one before by 2 and 0
"""

from __future__ import annotations

from collections.abc import Sequence

from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where


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
    dim backwards, as PyTorch's `F.pad` (`tg.pad`). Only `mode="constant"`, and no
    negative pads (cropping: slice instead)."""
    if mode != "constant":
        raise error(f"pad: only mode='constant' is supported, got {mode!r}")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise error(
            f"pad: needs (before, after) pairs for at most {input.ndim} dims, got {list(pad)}"
        )
    if any(p < 0 for p in pad):
        raise error(f"pad: negative pads are not supported, got {list(pad)} (slice instead)")
    low, high = [0] * input.ndim, [0] * input.ndim
    for k in range(len(pad) // 2):
        low[input.ndim - 1 - k], high[input.ndim - 1 - k] = pad[2 * k], pad[2 * k + 1]
    return input._new(B.pad(input.value, low, high, 0.0 if value is None else float(value)))


__all__ = ["elu", "hardtanh", "pad", "silu", "softplus"]
