"""PyTorch's spatial rearrangements beyond `functional_conv.py`, as composites of tg
ops: pixel shuffles, the non-constant pads, the 1-d pools and adaptive max pooling.

    F.pixel_shuffle(x, 2)            # [N, C*4, H, W] -> [N, C, 2H, 2W]: reshape, permute
    F.pad(x, (1, 1), mode="reflect") # one tg.gather a padded dim, at mirrored positions
    F.max_pool1d(x, 2)               # max_pool2d of x[:, :, None, :]
    F.adaptive_max_pool2d(x, 1)      # amax over H, W (or a max_pool2d of a divisible size)

A gathered pad's gradient is the scatter back (an edge element gets its mirror images'
too), as PyTorch's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import Float32Type

from gradfuse.frontend.functional_conv import (
    _check_nchw,
    _windows,
    adaptive_avg_pool2d,
    avg_pool2d,
    max_pool2d,
    pair,
)
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor

__all__ = [
    "pixel_shuffle", "pixel_unshuffle", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d",
    "adaptive_max_pool1d", "adaptive_max_pool2d", "unfold",
]  # fmt: skip


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """[*, C r^2, H, W] -> [*, C, H r, W r]: channel `c r^2 + i r + j` to pixel (i, j) of
    each r x r block, as PyTorch's (the sub-pixel convolution of super_resolution)."""
    r = upscale_factor
    *lead, c, h, w = _spatial("pixel_shuffle", input)
    if c % (r * r):
        raise error(f"pixel_shuffle: {c} channels are not divisible by upscale_factor^2 = {r * r}")
    n = len(lead)
    x = input.reshape([*lead, c // (r * r), r, r, h, w])
    x = x.permute([*range(n), n, n + 3, n + 1, n + 4, n + 2])
    return x.reshape([*lead, c // (r * r), h * r, w * r])


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """The inverse of `pixel_shuffle`: [*, C, H r, W r] -> [*, C r^2, H, W]."""
    r = downscale_factor
    *lead, c, h, w = _spatial("pixel_unshuffle", input)
    if h % r or w % r:
        raise error(f"pixel_unshuffle: {h} x {w} is not divisible by downscale_factor {r}")
    n = len(lead)
    x = input.reshape([*lead, c, h // r, r, w // r, r])
    x = x.permute([*range(n), n, n + 2, n + 4, n + 1, n + 3])
    return x.reshape([*lead, c * r * r, h // r, w // r])


def _spatial(what: str, x: Tensor) -> list[int]:
    if x.ndim < 3:
        raise error(f"{what}: expects [*, C, H, W], got shape {list(x.shape)}")
    return list(x.shape)


def unfold(
    input: Tensor, kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1,
) -> Tensor:  # fmt: skip
    """The sliding blocks of an [N, C, H, W] image as columns, [N, C kh kw, L] (im2col):
    the `tg.windows` view [N, C, oh, ow, kh, kw], permuted and reshaped; its gradient
    adds each column back into the pixels it came from (PyTorch's `fold`)."""
    _check_nchw("unfold", input)
    kernel, dil = pair(kernel_size, "unfold kernel_size"), pair(dilation, "unfold dilation")
    pad, st = pair(padding, "unfold padding"), pair(stride, "unfold stride")
    win = _windows(input, kernel, st, pad, dil)
    n, c, oh, ow, kh, kw = win.shape
    return win.permute([0, 1, 4, 5, 2, 3]).reshape([n, c * kh * kw, oh * ow])


# --- pads by position ---------------------------------------------------------------------------


def positions(mode: str, n: int, before: int, after: int) -> np.ndarray:
    """Where each element of a dim of `n` padded by `before` and `after` comes from."""
    i = np.arange(-before, n + after)
    if mode == "reflect":
        if before >= n or after >= n:
            raise error(f"pad: reflect padding ({before}, {after}) must be less than the dim's size {n}")  # fmt: skip
        period = 2 * (n - 1)
        i = i % period if n > 1 else np.zeros_like(i)  # (NumPy's %: 0 <= i < period)
        return np.where(i >= n, period - i, i)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    if before > n or after > n:
        raise error(f"pad: circular padding ({before}, {after}) must not exceed the dim's size {n}")  # fmt: skip
    return i % n


def gathered_pad(input: Tensor, pad: Sequence[int], mode: str) -> Tensor:
    """`F.pad` with mode "reflect", "replicate" or "circular": per padded dim (the last
    len(pad) / 2), a `tg.gather` at the source positions, broadcast along the others."""
    if mode not in ("reflect", "replicate", "circular"):
        raise error(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")  # fmt: skip
    if any(p < 0 for p in pad):
        raise error(f"pad: negative pads are not supported, got {list(pad)} (slice instead)")
    out = input
    for k in range(len(pad) // 2):
        d = input.ndim - 1 - k
        at = positions(mode, input.shape[d], pad[2 * k], pad[2 * k + 1]).astype(np.float32)
        shape = [len(at) if j == d else n for j, n in enumerate(out.shape)]
        index = out._new(B.dense(at.reshape([-1 if j == d else 1 for j in range(out.ndim)]), Float32Type()))  # fmt: skip
        out = out.gather(d, index.broadcast_to(shape))
    return out


# --- pools ---------------------------------------------------------------------------------


def _as_2d(what: str, x: Tensor) -> Tensor:
    """[N, C, L] (or [C, L]) as [N, C, 1, L]."""
    if x.ndim not in (2, 3):
        raise error(f"{what}: expects [N, C, L] or [C, L], got shape {list(x.shape)}")
    return (x if x.ndim == 3 else x.unsqueeze(0)).unsqueeze(2)


def _from_2d(y: Tensor, like: Tensor) -> Tensor:
    y = y.squeeze(2)
    return y if like.ndim == 3 else y.squeeze(0)


def _one(v: int | Sequence[int] | None) -> int | None:
    return v[0] if isinstance(v, Sequence) else v


def max_pool1d(
    input: Tensor, kernel_size: int, stride: int | None = None, padding: int = 0,
    dilation: int = 1, ceil_mode: bool = False,
) -> Tensor:  # fmt: skip
    """The maximum of each window along the last dim (`max_pool2d` of a 1-row image)."""
    k, s = _one(kernel_size), _one(stride)
    y = max_pool2d(_as_2d("max_pool1d", input), (1, k), (1, s or k), (0, _one(padding)), (1, _one(dilation)), ceil_mode)  # type: ignore[arg-type]  # fmt: skip
    return _from_2d(y, input)


def avg_pool1d(
    input: Tensor, kernel_size: int, stride: int | None = None, padding: int = 0,
    ceil_mode: bool = False, count_include_pad: bool = True,
) -> Tensor:  # fmt: skip
    """The mean of each window along the last dim (`avg_pool2d` of a 1-row image)."""
    k, s = _one(kernel_size), _one(stride)
    y = avg_pool2d(_as_2d("avg_pool1d", input), (1, k), (1, s or k), (0, _one(padding)), ceil_mode, count_include_pad)  # type: ignore[arg-type]  # fmt: skip
    return _from_2d(y, input)


def adaptive_avg_pool1d(input: Tensor, output_size: int) -> Tensor:
    """Averages over PyTorch's adaptive windows of the last dim."""
    y = adaptive_avg_pool2d(_as_2d("adaptive_avg_pool1d", input), (1, _one(output_size)))  # type: ignore[arg-type]  # fmt: skip
    return _from_2d(y, input)


def adaptive_max_pool2d(input: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """The maximum over PyTorch's adaptive windows: of all of H, W for 1 x 1, else of
    equal windows where the size divides (other sizes are an error)."""
    if input.ndim not in (3, 4):
        raise error(f"adaptive_max_pool2d: expects [N, C, H, W] or [C, H, W], got shape {list(input.shape)}")  # fmt: skip
    h, w = input.shape[-2:]
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    oh, ow = (h if sizes[0] is None else sizes[0]), (w if sizes[1] is None else sizes[1])
    if (oh, ow) == (1, 1):
        return input.amax((-2, -1), keepdim=True)
    if h % oh or w % ow:
        raise error(f"adaptive_max_pool2d: {h} x {w} to {oh} x {ow}: only sizes that divide are supported")  # fmt: skip
    x = input if input.ndim == 4 else input.unsqueeze(0)
    y = max_pool2d(x, (h // oh, w // ow))
    return y if input.ndim == 4 else y.squeeze(0)


def adaptive_max_pool1d(input: Tensor, output_size: int) -> Tensor:
    """`adaptive_max_pool2d` along the last dim."""
    y = adaptive_max_pool2d(_as_2d("adaptive_max_pool1d", input), (1, _one(output_size)))
    return _from_2d(y, input)
