"""`Conv1d`, `Conv2d` and `ConvTranspose2d` with PyTorch's arguments, layouts and init.

Weights are [out, in/groups, k] for `Conv1d`, OIHW for `Conv2d` and
[in, out/groups, kh, kw] for `ConvTranspose2d`,
both kaiming-uniform with a = sqrt(5) (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), as is
the bias, drawn from `gradfuse.manual_seed`'s generator:

    conv = Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
    seq = Conv1d(80, 512, kernel_size=5, padding=2)      # over [N, 80, L]
    up = ConvTranspose2d(100, 512, 4, 1, 0, bias=False)
"""

from __future__ import annotations

from typing import Any, ClassVar

from gradfuse.frontend import functional_conv as F
from gradfuse.frontend.nn.layers import kaiming_uniform
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype, only
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


class _ConvNd(Module):
    """What both convolutions share: sizes, groups, weight and bias."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: F.IntPair,
        stride: F.IntPair,
        padding: F.IntPair | str,
        dilation: F.IntPair,
        groups: int,
        bias: bool,
        transposed: bool,
        dims: int = 2,
    ):
        super().__init__()
        what = type(self).__name__
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise error(
                f"{what}: in_channels {in_channels} and out_channels {out_channels}"
                f" must be divisible by groups {groups}"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = F.ntuple(kernel_size, dims, f"{what} kernel_size")
        self.stride = F.ntuple(stride, dims, f"{what} stride")
        self.padding = (
            padding if isinstance(padding, str) else F.ntuple(padding, dims, f"{what} padding")
        )
        self.dilation = F.ntuple(dilation, dims, f"{what} dilation")
        self.groups = groups
        if transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight, self.bias = kaiming_uniform(shape, out_channels if bias else None)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size},"
            f" stride={self.stride}, padding={self.padding}"
            + (f", dilation={self.dilation}" if any(d != 1 for d in self.dilation) else "")
            + (f", groups={self.groups}" if self.groups != 1 else "")
            + (", bias=False" if self.bias is None else "")
        )


class _Conv(_ConvNd):
    """What `Conv1d` and `Conv2d` share: PyTorch's arguments and `forward`."""

    DIMS: ClassVar[int] = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: F.IntPair,
        stride: F.IntPair = 1,
        padding: F.IntPair | str = 0,
        dilation: F.IntPair = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ):
        only(type(self).__name__, "padding_mode", padding_mode, "zeros")
        device_and_dtype(type(self).__name__, device, dtype)
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            transposed=False, dims=self.DIMS,
        )  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        conv = F.conv1d if self.DIMS == 1 else F.conv2d
        return conv(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


class Conv1d(_Conv):
    """1-d convolution of [N, C, L] input with weight [out, in/groups, k] and bias [out].

    `Conv1d(80, 512, 5, padding=2)(x)` maps [N, 80, L] to [N, 512, L].
    """

    DIMS = 1


class Conv2d(_Conv):
    """2-d convolution of NCHW input with weight [out, in/groups, kh, kw] and bias [out].

    `Conv2d(3, 16, 3, padding=1)(x)` maps [N, 3, H, W] to [N, 16, H, W].
    """


class ConvTranspose2d(_ConvNd):
    """2-d transposed convolution, weight [in, out/groups, kh, kw] and bias [out] (PyTorch's).

    `ConvTranspose2d(64, 32, 4, stride=2, padding=1)(x)` doubles H and W.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: F.IntPair,
        stride: F.IntPair = 1,
        padding: F.IntPair = 0,
        output_padding: F.IntPair = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: F.IntPair = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ):
        only("ConvTranspose2d", "padding_mode", padding_mode, "zeros")
        device_and_dtype("ConvTranspose2d", device, dtype)
        if isinstance(padding, str):
            raise error(f"ConvTranspose2d: padding must be an int or a pair, got {padding!r}")
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            transposed=True,
        )  # fmt: skip
        self.output_padding = F.pair(output_padding, "ConvTranspose2d output_padding")

    def forward(self, x: Tensor) -> Tensor:
        return F.conv_transpose2d(
            x, self.weight, self.bias, self.stride, self.padding,  # type: ignore[arg-type]
            self.output_padding, self.groups, self.dilation,
        )  # fmt: skip
