"""Modules of PyTorch's spatial rearrangements (`functional_spatial.py`): pixel shuffles,
pads of every mode and the 1-d and adaptive max pools.

    PixelShuffle(3)(x)               # [N, 9C, H, W] -> [N, C, 3H, 3W]
    ReflectionPad2d(1)(x)            # F.pad(x, (1, 1, 1, 1), mode="reflect")
    MaxPool1d(2)(x), AdaptiveMaxPool2d(1)(x)
"""

from __future__ import annotations

from collections.abc import Sequence

from gradfuse.frontend import functional_spatial as S
from gradfuse.frontend.functional_act import pad
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import only
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


class PixelShuffle(Module):
    """[*, C r^2, H, W] -> [*, C, H r, W r] (`F.pixel_shuffle`)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return S.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """[*, C, H r, W r] -> [*, C r^2, H, W] (`F.pixel_unshuffle`)."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return S.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class _Pad(Module):
    """`F.pad` of the last `DIMS` dims by `padding` (an int for every side, or PyTorch's
    (left, right[, top, bottom]) tuple), in `MODE`."""

    MODE, DIMS = "constant", 2

    def __init__(self, padding: int | Sequence[int]):
        super().__init__()
        sides = 2 * self.DIMS
        self.padding = (padding,) * sides if isinstance(padding, int) else tuple(padding)
        if len(self.padding) != sides:
            raise error(f"{type(self).__name__}: padding needs 1 or {sides} values, got {padding!r}")  # fmt: skip
        self.value = 0.0

    def forward(self, x: Tensor) -> Tensor:
        return pad(x, self.padding, self.MODE, self.value if self.MODE == "constant" else None)

    def extra_repr(self) -> str:
        return f"{self.padding}" + (f", value={self.value}" if self.MODE == "constant" else "")


class ReflectionPad1d(_Pad):
    MODE, DIMS = "reflect", 1


class ReflectionPad2d(_Pad):
    MODE, DIMS = "reflect", 2


class ReplicationPad1d(_Pad):
    MODE, DIMS = "replicate", 1


class ReplicationPad2d(_Pad):
    MODE, DIMS = "replicate", 2


class CircularPad1d(_Pad):
    MODE, DIMS = "circular", 1


class CircularPad2d(_Pad):
    MODE, DIMS = "circular", 2


class ZeroPad1d(_Pad):
    DIMS = 1


class ZeroPad2d(_Pad):
    DIMS = 2


class ConstantPad1d(_Pad):
    DIMS = 1

    def __init__(self, padding: int | Sequence[int], value: float):
        super().__init__(padding)
        self.value = value


class ConstantPad2d(_Pad):
    DIMS = 2

    def __init__(self, padding: int | Sequence[int], value: float):
        super().__init__(padding)
        self.value = value


class MaxPool1d(Module):
    """The maximum of each window along the last dim (`F.max_pool1d`)."""

    def __init__(
        self, kernel_size: int, stride: int | None = None, padding: int = 0, dilation: int = 1,
        return_indices: bool = False, ceil_mode: bool = False,
    ):  # fmt: skip
        super().__init__()
        only("MaxPool1d", "return_indices", return_indices, False)
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return S.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(Module):
    """The mean of each window along the last dim (`F.avg_pool1d`)."""

    def __init__(
        self, kernel_size: int, stride: int | None = None, padding: int = 0,
        ceil_mode: bool = False, count_include_pad: bool = True,
    ):  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return S.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)  # fmt: skip

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _Adaptive(Module):
    FN = staticmethod(S.adaptive_avg_pool1d)

    def __init__(self, output_size: int | Sequence[int | None], return_indices: bool = False):
        super().__init__()
        only(type(self).__name__, "return_indices", return_indices, False)
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return type(self).FN(x, self.output_size)  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_Adaptive):
    """Averages over PyTorch's adaptive windows of the last dim."""

    FN = staticmethod(S.adaptive_avg_pool1d)

    def __init__(self, output_size: int):
        super().__init__(output_size)


class AdaptiveMaxPool1d(_Adaptive):
    """The maximum over PyTorch's adaptive windows of the last dim."""

    FN = staticmethod(S.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_Adaptive):
    """The maximum over PyTorch's adaptive windows of H and W (1 x 1, or sizes that
    divide)."""

    FN = staticmethod(S.adaptive_max_pool2d)


class Unfold(Module):
    """The sliding blocks of an image as columns, [N, C kh kw, L] (`F.unfold`)."""

    def __init__(
        self, kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1,
    ):  # fmt: skip
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return S.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"  # noqa: E501
