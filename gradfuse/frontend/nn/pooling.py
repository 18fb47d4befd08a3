"""Pooling modules with PyTorch's arguments: `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`.

Each is a `tg.windows` view of the input and a reduction over the window dims:

    pool = MaxPool2d(kernel_size=3, stride=2, padding=1)   # padding counts as -inf
    head = AdaptiveAvgPool2d((1, 1))                        # a mean over H and W
"""

from __future__ import annotations

from collections.abc import Sequence

from gradfuse.frontend import functional_conv as F
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import only
from gradfuse.frontend.tensor import Tensor


class MaxPool2d(Module):
    """The maximum of each window (stride defaults to kernel_size; padding is -inf).

    `MaxPool2d(2)(x)` halves H and W.
    """

    def __init__(
        self,
        kernel_size: F.IntPair,
        stride: F.IntPair | None = None,
        padding: F.IntPair = 0,
        dilation: F.IntPair = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ):
        super().__init__()
        only("MaxPool2d", "return_indices", return_indices, False)
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.ceil_mode = ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """The mean of each window (zero padding counted unless `count_include_pad=False`).

    `AvgPool2d(2)(x)` halves H and W.
    """

    def __init__(
        self,
        kernel_size: F.IntPair,
        stride: F.IntPair | None = None,
        padding: F.IntPair = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Averages to a fixed output size with PyTorch's adaptive windows (None keeps a dim).

    `AdaptiveAvgPool2d((1, 1))(x)` maps [N, C, H, W] to [N, C, 1, 1].
    """

    def __init__(self, output_size: int | Sequence[int | None]):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
