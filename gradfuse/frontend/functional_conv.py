"""Convolution, pooling and batch-norm functions on traced tensors (PyTorch's `F`).

Each records a few tg ops: `tg.conv2d` / `tg.conv_transpose2d` for convolutions,
`tg.windows` plus a reduction for pooling, reductions and elementwise ops for
batch norm; the autodiff pass differentiates all of them:

    y = F.conv2d(x, w, b, stride=2, padding=1)       # tg.conv2d, then + b
    p = F.max_pool2d(y, 3, stride=2, padding=1)      # tg.windows, + -inf padding, tg.reduce_max
    z = F.batch_norm(p, rm, rv, weight, bias, training=True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend.functional import constant
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import emit, error
from gradfuse.frontend.tensor import Tensor, where
from gradfuse.frontend.tensor_shape import per_channel

IntPair = int | Sequence[int]


def ntuple(value: IntPair, n: int, what: str) -> tuple[int, ...]:
    """An int or a sequence of `n` ints as an n-tuple: `ntuple(3, 1, "stride") == (3,)`."""
    values = (value,) * n if isinstance(value, int | np.integer) else tuple(value)
    if len(values) != n or not all(isinstance(v, int | np.integer) for v in values):
        count = "one int" if n == 1 else f"an int or {n} ints"
        raise error(f"{what}: expected {count}, got {value!r}")
    return tuple(int(v) for v in values)


def pair(value: IntPair, what: str) -> tuple[int, int]:
    """An int or a sequence of two ints as a pair: `pair(3, "kernel_size") == (3, 3)`."""
    first, second = ntuple(value, 2, what)
    return first, second


def _check_nchw(what: str, x: Tensor) -> None:
    if x.ndim != 4:
        raise error(f"{what}: expected a 4-d input [N, C, H, W], got {fmt_shape(x.shape)}")


def _add_channel_bias(y: Tensor, bias: Tensor | None) -> Tensor:
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


def _pad(x: Tensor, top: int, bottom: int, left: int, right: int, value: float = 0.0) -> Tensor:
    if top == bottom == left == right == 0:
        return x
    return Tensor(emit(tg.PadOp(x.value, [0, 0, top, left], [0, 0, bottom, right], value)).result)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> Tensor:
    """2-d cross-correlation of NCHW `input` with OIHW `weight` (`tg.conv2d`), plus `bias`.

    `padding` may be `"valid"` (0) or `"same"` (stride 1; an odd total pads one more
    at the bottom/right, as PyTorch). `conv2d(x, w, b, stride=2, padding=1)`
    """
    _check_nchw("conv2d", input)
    st, dil = pair(stride, "conv2d stride"), pair(dilation, "conv2d dilation")
    if isinstance(padding, str):
        if padding == "valid":
            pad = (0, 0)
        elif padding == "same":
            if st != (1, 1):
                raise error("conv2d: padding='same' needs stride 1")
            kh, kw = weight.shape[2], weight.shape[3]
            total = (dil[0] * (kh - 1), dil[1] * (kw - 1))
            pad = (total[0] // 2, total[1] // 2)
            extra = (total[0] - 2 * pad[0], total[1] - 2 * pad[1])
            input = _pad(input, 0, extra[0], 0, extra[1])
        else:
            raise error(
                f"conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}"
            )
    else:
        pad = pair(padding, "conv2d padding")
    op = tg.Conv2dOp(input.value, weight.value, st, pad, dil, groups)
    return _add_channel_bias(Tensor(emit(op).result), bias)


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> Tensor:
    """1-d cross-correlation of [N, C, L] (or [C, L]) `input` with weight [out, in/groups, k],
    plus `bias`: a `tg.conv2d` over a 1-high image [N, C, 1, L], as PyTorch computes it.

    `padding` may be `"valid"` or `"same"` (stride 1). `conv1d(x, w, b, padding=2)`
    """
    if input.ndim not in (2, 3) or weight.ndim != 3:
        raise error(
            f"conv1d: expected an input [N, C, L] or [C, L] and a weight [out, in/groups, k],"
            f" got {fmt_shape(input.shape)} and {fmt_shape(weight.shape)}"
        )
    if input.shape[-2] != weight.shape[1] * groups:
        raise error(
            f"conv1d: input {fmt_shape(input.shape)} has {input.shape[-2]} channels, weight"
            f" {fmt_shape(weight.shape)} with groups={groups} expects {weight.shape[1] * groups}"
        )
    if padding == "same" and ntuple(stride, 1, "conv1d stride") != (1,):
        raise error("conv1d: padding='same' needs stride 1")
    batched = input if input.ndim == 3 else input.unsqueeze(0)
    pad = padding if isinstance(padding, str) else (0, *ntuple(padding, 1, "conv1d padding"))
    y = conv2d(
        batched.unsqueeze(2), weight.unsqueeze(2), bias, (1, *ntuple(stride, 1, "conv1d stride")),
        pad, (1, *ntuple(dilation, 1, "conv1d dilation")), groups,
    ).squeeze(2)  # fmt: skip
    return y if input.ndim == 3 else y.squeeze(0)


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair = 0,
    output_padding: IntPair = 0,
    groups: int = 1,
    dilation: IntPair = 1,
) -> Tensor:
    """2-d transposed convolution, weight [in, out/groups, kh, kw] (`tg.conv_transpose2d`).

    `conv_transpose2d(z, w, b, stride=2, padding=1)` doubles H and W for a 4x4 kernel.
    """
    _check_nchw("conv_transpose2d", input)
    op = tg.ConvTranspose2dOp(
        input.value, weight.value, pair(stride, "conv_transpose2d stride"),
        pair(padding, "conv_transpose2d padding"),
        pair(output_padding, "conv_transpose2d output_padding"),
        pair(dilation, "conv_transpose2d dilation"), groups,
    )  # fmt: skip
    return _add_channel_bias(Tensor(emit(op).result), bias)


def _pool_args(
    what: str, x: Tensor, kernel_size: IntPair, stride: IntPair | None, padding: IntPair,
    ceil_mode: bool,
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:  # fmt: skip
    _check_nchw(what, x)
    kernel = pair(kernel_size, f"{what} kernel_size")
    st = kernel if stride is None or stride == [] else pair(stride, f"{what} stride")
    pad = pair(padding, f"{what} padding")
    if any(2 * p > k for p, k in zip(pad, kernel)):
        raise error(f"{what}: padding {pad} should be at most half of kernel_size {kernel}")
    if ceil_mode:
        raise error(f"{what}: ceil_mode=True is not supported")
    return kernel, st, pad


def _windows(
    x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> Tensor:  # fmt: skip
    """`tg.windows`: [N, C, oh, ow, kh, kw], 0 where a window slot is in the padding."""
    return Tensor(emit(tg.WindowsOp(x.value, kernel, stride, padding, dilation)).result)


def _padding_mask(
    x: Tensor, win: Tensor, kernel: tuple[int, int], stride: tuple[int, int],
    padding: tuple[int, int], dilation: tuple[int, int],
) -> np.ndarray:  # fmt: skip
    """[oh, ow, kh, kw]: True where window slot (i, j, p, q) lies in the padding."""
    outside = []
    for d in range(2):
        at = np.arange(win.shape[2 + d])[:, None] * stride[d]
        at = at + np.arange(kernel[d])[None, :] * dilation[d] - padding[d]
        outside.append((at < 0) | (at >= x.shape[2 + d]))
    return outside[0][:, None, :, None] | outside[1][None, :, None, :]


def max_pool2d(
    input: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    dilation: IntPair = 1,
    ceil_mode: bool = False,
) -> Tensor:
    """The maximum of each window; padding counts as -inf, as in PyTorch.

    `tg.windows`, plus a constant that is -inf on padded slots, then `tg.reduce_max`.
    Tied maxima share the gradient evenly (PyTorch gives it to the first one).
    `max_pool2d(x, 3, stride=2, padding=1)`
    """
    kernel, st, pad = _pool_args("max_pool2d", input, kernel_size, stride, padding, ceil_mode)
    dil = pair(dilation, "max_pool2d dilation")
    win = _windows(input, kernel, st, pad, dil)
    if pad != (0, 0):
        outside = _padding_mask(input, win, kernel, st, pad, dil)
        win = win + constant(np.where(outside, -np.inf, 0.0)[None, None], input.dtype)
    return win.amax((4, 5))


def avg_pool2d(
    input: Tensor,
    kernel_size: IntPair,
    stride: IntPair | None = None,
    padding: IntPair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean of each window (zero padding counted unless `count_include_pad=False`).

    `tg.windows`, then `tg.reduce_sum` and a scale. `avg_pool2d(x, 2)` halves H and W.
    """
    kernel, st, pad = _pool_args("avg_pool2d", input, kernel_size, stride, padding, ceil_mode)
    win = _windows(input, kernel, st, pad)
    sums = win.sum((4, 5))
    if divisor_override:
        return sums * (1.0 / divisor_override)
    if count_include_pad or pad == (0, 0):
        return sums * (1.0 / (kernel[0] * kernel[1]))
    inside = ~_padding_mask(input, win, kernel, st, pad, (1, 1))
    counts = inside.sum((2, 3))
    return sums * constant(1.0 / counts, input.dtype)


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    """The [out, size] averaging matrix of PyTorch's adaptive pooling along one dim."""
    m = np.zeros((out, size))
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


def adaptive_avg_pool2d(input: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Averages over PyTorch's adaptive windows to `output_size` (None keeps a dim).

    A divisible size is an `avg_pool2d`, 1x1 a mean, anything else two products with
    constant averaging matrices. `adaptive_avg_pool2d(x, 1)` -> [N, C, 1, 1]
    """
    _check_nchw("adaptive_avg_pool2d", input)
    h, w = input.shape[2:]
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != 2:
        raise error(f"adaptive_avg_pool2d: output_size needs 1 or 2 values, got {output_size!r}")
    oh, ow = (h if sizes[0] is None else sizes[0]), (w if sizes[1] is None else sizes[1])
    if oh < 1 or ow < 1:
        raise error(f"adaptive_avg_pool2d: output size must be positive, got {(oh, ow)}")
    if (oh, ow) == (1, 1):
        return input.mean((2, 3), keepdim=True)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(input, (h // oh, w // ow))
    out = input if ow == w else input @ constant(_adaptive_matrix(w, ow).T, input.dtype)
    return out if oh == h else constant(_adaptive_matrix(h, oh), input.dtype) @ out


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """`x` where positive, else `negative_slope * x` (gradient at 0 is the slope, as PyTorch).

    `leaky_relu(x, 0.2)` is `max(x, 0.2 x)` (`tg.max`, whose ties go to the rhs).
    """
    if 0.0 <= negative_slope <= 1.0:
        return input.maximum(input * negative_slope)
    return where(input > 0.0, input, input * negative_slope)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merges dims `start_dim..end_dim` into one (`Tensor.flatten`). `flatten(x, 1)`:
    [N, C, H, W] -> [N, C*H*W]"""
    return input.flatten(start_dim, end_dim)


BatchMean = Callable[[Tensor, list[int]], tuple[Tensor, "float | Tensor"]]
"""`(t, dims) -> (mean of t over dims, keepdim; the count of values per channel)`."""


def local_batch_mean(t: Tensor, dims: list[int]) -> tuple[Tensor, float | Tensor]:
    """The channel mean of this batch: `t.mean(dims, keepdim=True)`, and its count."""
    return t.mean(dims, keepdim=True), float(t.numel() // t.shape[1])


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float | Tensor = 0.1,
    eps: float = 1e-5,
    batch_mean: BatchMean | None = None,
) -> Tensor:
    """Normalises each channel (dim 1) with batch statistics (`training`) or running ones.

    In training the biased batch variance normalises; running stats that are
    `Parameter`s are updated in place with `tg.assign`, the variance unbiased:
    `running = (1 - momentum) * running + momentum * batch` (`momentum` may be a traced
    scalar). Gradients flow through the batch statistics. `batch_mean(t, dims)` gives
    a channel mean (keepdim) and the count of values behind it: the batch's own by
    default (`local_batch_mean`), every rank's for `SyncBatchNorm`.
    `batch_norm(x, rm, rv, w, b, training=True)`
    """
    if input.ndim < 2:
        raise error(f"batch_norm: expected an input [N, C, ...], got {fmt_shape(input.shape)}")
    c = input.shape[1]
    dims = [0] + list(range(2, input.ndim))
    count = input.numel() // c if c else 0
    if training:
        if count <= 1:
            raise error(
                f"batch_norm: expected more than 1 value per channel when training,"
                f" got input {fmt_shape(input.shape)}"
            )
        mean_of = batch_mean or local_batch_mean
        mean, total = mean_of(input, dims)
        centred = input - mean
        var, _ = mean_of(centred * centred, dims)
        for stat, batch in ((running_mean, mean), (running_var, var * (total / (total - 1)))):
            if isinstance(stat, Parameter):
                stat.assign(stat * (1.0 - momentum) + batch.reshape(c) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise error("batch_norm: evaluation needs running_mean and running_var")
        centred = input - per_channel(running_mean, input.ndim)
        var = per_channel(running_var, input.ndim)
    scale = (var + eps).sqrt().reciprocal()
    if weight is not None:
        scale = scale * per_channel(weight, input.ndim)
    y = centred * scale
    return y + per_channel(bias, input.ndim) if bias is not None else y


__all__ = [
    "conv1d", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
    "leaky_relu", "flatten", "batch_norm", "local_batch_mean", "BatchMean", "pair", "ntuple",
]  # fmt: skip
