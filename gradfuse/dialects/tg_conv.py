"""tg convolutions: composites that `tg-decompose` turns into contractions whose
operands are guarded views (the im2col and the padding are access maps, never a
buffer). Semantics and layouts are PyTorch's (NCHW, weights OIHW / IOHW):

    %y = tg.conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<8x16x16x16xf32>
    %z = tg.conv_transpose2d %y, %v stride=[2, 2] padding=[1, 1] output_padding=[0, 0] dilation=[1, 1] groups=1 : tensor<8x3x32x32xf32>
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, TensorType, i64
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from gradfuse.dialects.tg_base import TgOp, fmt_shape, i64_array, ints, shape_of, tensor_like


@dataclass(frozen=True)
class ConvGeometry:
    """The sizes of one conv2d: input n x c x h x w, weight o x c/groups x kh x kw."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    @property
    def oh(self) -> int:
        span = self.dilation[0] * (self.kh - 1) + 1
        return (self.h + 2 * self.padding[0] - span) // self.stride[0] + 1

    @property
    def ow(self) -> int:
        span = self.dilation[1] * (self.kw - 1) + 1
        return (self.w + 2 * self.padding[1] - span) // self.stride[1] + 1

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def og(self) -> int:
        return self.o // self.groups


class ConvOp(TgOp):
    """Shared properties and checks of conv2d and conv_transpose2d."""

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    stride = prop_def(DenseArrayBase)
    padding = prop_def(DenseArrayBase)
    dilation = prop_def(DenseArrayBase)
    groups = prop_def(IntegerAttr)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = True
    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ("input", "weight", "result")

    def pair(self, name: str) -> tuple[int, int]:
        values = ints(getattr(self, name))
        if len(values) != 2:
            raise self.fail(f"{name} needs 2 values, got {list(values)}")
        return values[0], values[1]

    def conv_geometry(self, image: SSAValue) -> ConvGeometry:
        """The conv2d of input `image` with this op's weight and properties."""
        n, c, h, w = shape_of(image)
        o, _, kh, kw = shape_of(self.weight)
        return ConvGeometry(
            n, c, h, w, o, kh, kw, self.pair("stride"), self.pair("padding"),
            self.pair("dilation"), self.groups.value.data,
        )  # fmt: skip

    def check_common(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        x, w = shape_of(self.input), shape_of(self.weight)
        if len(x) != 4 or len(w) != 4:
            raise self.fail(
                f"input and weight must be 4-d (NCHW, OIHW): {fmt_shape(x)}, {fmt_shape(w)}"
            )
        g = self.groups.value.data
        if g < 1 or any(v < 1 for v in (*self.pair("stride"), *self.pair("dilation"))):
            raise self.fail("groups, stride and dilation must be positive")
        if any(v < 0 for v in self.pair("padding")):
            raise self.fail("padding must not be negative")
        return x, w, g


def _props(stride, padding, dilation, groups, **extra) -> dict:
    props = {
        "stride": i64_array(stride), "padding": i64_array(padding),
        "dilation": i64_array(dilation), "groups": IntegerAttr(groups, i64),
    }  # fmt: skip
    props.update({k: i64_array(v) for k, v in extra.items()})
    return props


@irdl_op_definition
class Conv2dOp(ConvOp):
    """2-d convolution (cross-correlation), PyTorch's `F.conv2d` without bias.

    `%y = tg.conv2d %x, %w stride=[1, 1] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x4x8x8xf32>`
    """

    name = "tg.conv2d"

    def __init__(
        self,
        x: SSAValue,
        w: SSAValue,
        stride: Sequence[int] = (1, 1),
        padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        groups: int = 1,
    ):
        n, c, h, wd = shape_of(x)
        o, _, kh, kw = shape_of(w)
        geo = ConvGeometry(
            n, c, h, wd, o, kh, kw, tuple(stride), tuple(padding), tuple(dilation), groups
        )  # type: ignore[arg-type]
        super().__init__(
            operands=[x, w],
            result_types=[tensor_like(x, (n, o, geo.oh, geo.ow))],
            properties=_props(stride, padding, dilation, groups),
        )

    @property
    def geometry(self) -> ConvGeometry:
        return self.conv_geometry(self.input)

    def verify_(self) -> None:
        x, w, g = self.check_common()
        if x[1] % g or w[0] % g or w[1] != x[1] // g:
            raise self.fail(
                f"weight {fmt_shape(w)} does not fit input {fmt_shape(x)} with {g} group(s):"
                f" it needs {x[1] // g if g else 0} input channels per group"
            )
        geo = self.geometry
        if geo.oh < 1 or geo.ow < 1:
            raise self.fail(
                f"the kernel {w[2]}x{w[3]} is larger than the padded input {fmt_shape(x)}"
            )
        self.expect_shape("result shape", shape_of(self.result), (x[0], w[0], geo.oh, geo.ow))


@irdl_op_definition
class ConvTranspose2dOp(ConvOp):
    """2-d transposed convolution, PyTorch's `F.conv_transpose2d` without bias
    (weight: in_channels x out_channels/groups x kh x kw).

    `%y = tg.conv_transpose2d %x, %w stride=[2, 2] padding=[1, 1] output_padding=[0, 0] dilation=[1, 1] groups=1 : tensor<2x3x16x16xf32>`
    """

    name = "tg.conv_transpose2d"
    output_padding = prop_def(DenseArrayBase)

    def __init__(
        self,
        x: SSAValue,
        w: SSAValue,
        stride: Sequence[int] = (1, 1),
        padding: Sequence[int] = (0, 0),
        output_padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        groups: int = 1,
    ):
        n, _, h, wd = shape_of(x)
        _, og, kh, kw = shape_of(w)
        oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
        ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
        super().__init__(
            operands=[x, w],
            result_types=[tensor_like(x, (n, og * groups, oh, ow))],
            properties=_props(stride, padding, dilation, groups, output_padding=output_padding),
        )

    @property
    def geometry(self) -> ConvGeometry:
        """The conv2d whose input gradient this is: its input is our result."""
        return self.conv_geometry(self.result)

    def verify_(self) -> None:
        x, w, g = self.check_common()
        op_ = self.pair("output_padding")
        if x[1] != w[0] or w[0] % g:
            raise self.fail(
                f"weight {fmt_shape(w)} does not fit input {fmt_shape(x)} with {g} group(s)"
            )
        if any(p >= max(s, d) for p, s, d in zip(op_, self.pair("stride"), self.pair("dilation"))):
            raise self.fail("output_padding must be smaller than stride or dilation")
        if len(shape_of(self.result)) != 4:
            raise self.fail(f"result {fmt_shape(shape_of(self.result))} must be 4-d (NCHW)")
        geo = self.geometry
        if shape_of(self.result)[1] != w[1] * g or (geo.oh, geo.ow) != (x[2], x[3]):
            raise self.fail(
                f"result {fmt_shape(shape_of(self.result))} does not give input {fmt_shape(x)}"
            )


@irdl_op_definition
class WindowsOp(TgOp):
    """The sliding windows of an NCHW tensor, 0 where a window leaves the input:
    `y[n, c, i, j, p, q] = x[n, c, i*sh + p*dh - ph, j*sw + q*dw - pw]`. Pooling
    reduces over the last two dims.

    `%w = tg.windows %x kernel=[3, 3] stride=[2, 2] padding=[1, 1] dilation=[1, 1] : tensor<1x4x4x4x3x3xf32>`
    """

    name = "tg.windows"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(DenseArrayBase)
    stride = prop_def(DenseArrayBase)
    padding = prop_def(DenseArrayBase)
    dilation = prop_def(DenseArrayBase)
    traits = traits_def(Pure())
    FLOAT_OPERANDS: ClassVar[bool] = True
    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ("input", "result")

    def __init__(
        self,
        x: SSAValue,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
    ):
        n, c, h, w = shape_of(x)
        geo = ConvGeometry(
            n, c, h, w, c, kernel[0], kernel[1], tuple(stride), tuple(padding), tuple(dilation)
        )  # type: ignore[arg-type]
        super().__init__(
            operands=[x],
            result_types=[tensor_like(x, (n, c, geo.oh, geo.ow, *kernel))],
            properties={
                "kernel": i64_array(kernel), "stride": i64_array(stride),
                "padding": i64_array(padding), "dilation": i64_array(dilation),
            },
        )  # fmt: skip

    @property
    def geometry(self) -> ConvGeometry:
        """A depthwise conv2d geometry with the same windows."""
        n, c, h, w = shape_of(self.input)
        kh, kw = ints(self.kernel)
        pairs = ints(self.stride), ints(self.padding), ints(self.dilation)
        return ConvGeometry(n, c, h, w, c, kh, kw, *pairs, c)  # type: ignore[arg-type]

    def verify_(self) -> None:
        x = shape_of(self.input)
        if len(x) != 4:
            raise self.fail(f"input must be 4-d (NCHW), got {fmt_shape(x)}")
        for name in ("kernel", "stride", "padding", "dilation"):
            if len(ints(getattr(self, name))) != 2:
                raise self.fail(f"{name} needs 2 values")
        if any(
            v < 1 for name in ("kernel", "stride", "dilation") for v in ints(getattr(self, name))
        ):
            raise self.fail("kernel, stride and dilation must be positive")
        geo = self.geometry
        if geo.oh < 1 or geo.ow < 1:
            raise self.fail(f"the window is larger than the padded input {fmt_shape(x)}")
        want = (geo.n, geo.c, geo.oh, geo.ow, geo.kh, geo.kw)
        self.expect_shape("result shape", shape_of(self.result), want)


__all__ = ["ConvGeometry", "Conv2dOp", "ConvTranspose2dOp", "WindowsOp"]
