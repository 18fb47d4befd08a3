"""PyTorch's named `Tensor` methods that are an operator or a composite of ops gradfuse
has, its in-place updates, and its dtype and device conversions; `Tensor` has them as
methods:

    x.add(y, alpha=2)          # tg.mul, tg.add
    pred.eq(target.view_as(pred)).sum()     # a mask, counted as floats
    x.cos()                    # sin(x + pi/2) (tg.sin)
    a.bmm(b)                   # [B, N, K] @ [B, K, M] (tg.dot)
    h.new_zeros(2, 8)          # tg.constant 0.0, h's element type
    p.add_(p.grad, alpha=-lr)  # under no_grad(): tg.assign of p's new value
    x.to("cuda"), x.cpu()      # x: where a program runs is chosen by execute()

In-place updates: a `Parameter` assigns the new value (`tg.assign`); as in PyTorch, a
trainable one only under `gradfuse.no_grad()`. A plain tensor takes the new value (the
same Python object then stands for it); views taken of it before keep the old one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import Float32Type

from gradfuse.dialects.tg_base import tensor
from gradfuse.dialects.tg_builder import element_type
from gradfuse.frontend.dtypes import dtype_named, element_for
from gradfuse.frontend.eager import host_value
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor_shape import dims_arg

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Scalar, Tensor

F32 = Float32Type()


# --- arithmetic by name ---------------------------------------------------------------------


def add(self: Tensor, other: Tensor | Scalar, *, alpha: float = 1) -> Tensor:
    """`self + alpha * other` (torch's `add`)."""
    return self + (other * alpha if alpha != 1 else other)


def sub(self: Tensor, other: Tensor | Scalar, *, alpha: float = 1) -> Tensor:
    """`self - alpha * other` (torch's `sub`)."""
    return self - (other * alpha if alpha != 1 else other)


def mul(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """`self * other`."""
    return self * other


def div(self: Tensor, other: Tensor | Scalar, *, rounding_mode: str | None = None) -> Tensor:
    """`self / other`, rounded as `rounding_mode` says: None (not), "trunc" or "floor"."""
    if rounding_mode not in (None, "trunc", "floor"):
        raise error(f'div: rounding_mode must be None, "trunc" or "floor", got {rounding_mode!r}')
    q = self / other
    return q if rounding_mode is None else trunc(q) if rounding_mode == "trunc" else floor(q)


def neg(self: Tensor) -> Tensor:
    """`-self`."""
    return -self


def square(self: Tensor) -> Tensor:
    """`self * self`."""
    return self * self


def cos(self: Tensor) -> Tensor:
    """`cos(self)`, recorded as `sin(self + pi/2)` (`tg.sin`)."""
    return (self + math.pi / 2).sin()


def rpow(self: Tensor, base: object) -> Tensor:
    """`base ** self` for a positive number `base`: `exp2(self * log2(base))`."""
    if isinstance(base, bool) or not isinstance(base, int | float) or base <= 0:
        raise error("number ** tensor: the base must be a positive Python number")
    return self.exp2() if base == 2 else (self * math.log2(base)).exp2()


def pow_tensor(self: Tensor, exponent: Tensor) -> Tensor:
    """`self ** exponent` elementwise (broadcast), as PyTorch's: `|x| ** e` as
    `exp2(e log2 |x|)`, negative where x < 0 and e is an odd integer, NaN where x < 0
    and e is no integer, 1 where e is 0 (the polynomial tutorial's
    `x.unsqueeze(-1).pow(torch.tensor([1, 2, 3]))`)."""
    x, e = self, exponent
    size = self._where(e == 0.0, 1.0, (e * x.abs().log2()).exp2())
    integral = e == floor(e)
    odd = integral & (e - floor(e * 0.5) * 2.0 == 1.0)
    signed = self._where((x < 0.0) & odd, -size, size)
    return self._where((x < 0.0) & ~integral, float("nan"), signed)


def mm(self: Tensor, other: Tensor) -> Tensor:
    """The product of two matrices (torch's `mm`: both of rank 2)."""
    _rank("mm", 2, self, other)
    return self @ other


def bmm(self: Tensor, other: Tensor) -> Tensor:
    """Batched matrix products: [B, N, K] @ [B, K, M] -> [B, N, M] (torch's `bmm`)."""
    _rank("bmm", 3, self, other)
    return self @ other


def _rank(what: str, rank: int, *xs: Tensor) -> None:
    for x in xs:
        if x.ndim != rank:
            raise error(f"{what}: expects tensors of rank {rank}, got shape {list(x.shape)}")


# --- shapes of others -----------------------------------------------------------------------


def view_as(self: Tensor, other: Tensor) -> Tensor:
    """`self` in the shape of `other`."""
    return self.reshape(list(other.shape))


reshape_as = view_as


def expand_as(self: Tensor, other: Tensor) -> Tensor:
    """`self` broadcast to the shape of `other`."""
    return self.broadcast_to(list(other.shape))


def new_full(self: Tensor, size: Sequence[int], fill_value: float, **_: Any) -> Tensor:
    """A tensor of `size` filled with `fill_value`, of `self`'s element type."""
    return self._new(B.const(float(fill_value), tensor(tuple(size), element_type(self.value))))


def new_zeros(self: Tensor, *size: int | Sequence[int], **kwargs: Any) -> Tensor:
    """Zeros of `size`, of `self`'s element type (`h.new_zeros(2, 8)`)."""
    return new_full(self, list(dims_arg(size)), 0.0, **kwargs)


def new_ones(self: Tensor, *size: int | Sequence[int], **kwargs: Any) -> Tensor:
    """Ones of `size`, of `self`'s element type."""
    return new_full(self, list(dims_arg(size)), 1.0, **kwargs)


# --- dtypes and devices -----------------------------------------------------------------------


def to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """`self` as the dtype named (`x.to(gradfuse.float64)`, `x.to(other)`), else `self`:
    a device (`x.to("cuda")`, `x.to(device)`) changes nothing, since `execute()` chooses
    where the whole program runs."""
    dtype = dtype_named(args, kwargs)
    return self if dtype is None else type_(self, dtype)


def type_(self: Tensor, dtype: Any = None, **_: Any) -> Tensor | str:
    """`self` cast to `dtype` (float16/32/64; a mask becomes 0.0/1.0); without one, the
    type's name as PyTorch prints it (`"torch.FloatTensor"`)."""
    if dtype is None:
        names = {"float32": "Float", "float64": "Double", "float16": "Half", "bool": "Bool"}
        return f"torch.{names.get(self.dtype.name, self.dtype.name)}Tensor"
    if isinstance(dtype, str):  # "torch.FloatTensor"
        kinds = {"Float": np.float32, "Double": np.float64, "Half": np.float16, "Long": np.int64}
        dtype = kinds.get(dtype.removeprefix("torch.").removesuffix("Tensor"), dtype)
    named = dtype_named((dtype,), {})
    if named is not None and named.kind in "iu":
        return long(self)  # integers held as floats
    target = element_for(dtype)
    if target == element_type(self.value):
        return self
    return self._new(B.cast(self.value, target))


def round_(self: Tensor, decimals: int = 0) -> Tensor:
    """The nearest integer, ties to even, as PyTorch's `round` (its gradient is 0):
    `(x + c) - c` with `c = +-2**23` (float32; 2**52 for float64), where the sum's
    spacing is 1, so its rounding is the rounding to an integer; from `|x| >= c` on,
    every float is an integer already."""
    if decimals:
        scale = 10.0**decimals
        return round_(self * scale) / scale
    x = self.detach()
    big: Tensor | float = 2.0**52 if self.dtype == np.float64 else _spacing_one(x)
    c = (x < 0.0).float().to(self.dtype) * -2.0 * big + big  # -big or big
    return self._where(x.abs() < big, (x + c) - c, x)


def _spacing_one(x: Tensor) -> Tensor:
    """2**23, from where float32's spacing is 1, computed in the program so that a run in
    float64 (`execute(dtype=np.float64)`) gets 2**52: `(2**23 + 0.5) - 2**23` is 0 in
    float32 (the tie rounds to even) and 0.5 in float64. Each element's `x * 0 + 2**23`
    keeps the canonicalizer from folding it in Python's float64 (NaN where x is not
    finite, which rounding leaves as it is)."""
    low = x * 0.0 + 2.0**23
    half = (low + 0.5) - low
    return low + half * (2.0 * (2.0**52 - 2.0**23))


def floor(self: Tensor) -> Tensor:
    """The largest integer <= x (gradient 0)."""
    r = round_(self)
    return r - (r > self.detach()).float().to(self.dtype)


def ceil(self: Tensor) -> Tensor:
    """The smallest integer >= x (gradient 0)."""
    r = round_(self)
    return r + (r < self.detach()).float().to(self.dtype)


def trunc(self: Tensor) -> Tensor:
    """x rounded toward 0 (gradient 0)."""
    return self._where(self.detach() < 0.0, ceil(self), floor(self))


def long(self: Tensor) -> Tensor:
    """`trunc(x)`, held as floats: gradfuse's integers (indices, labels) are floats, exact
    to 2**24 in float32 (`target.long()` of class ids changes nothing)."""
    return trunc(self) if self.dtype != np.bool_ else self.float()


def double(self: Tensor) -> Tensor:
    """`self` as float64."""
    return type_(self, np.float64)  # type: ignore[return-value]


def half(self: Tensor) -> Tensor:
    """`self` as float16."""
    return type_(self, np.float16)  # type: ignore[return-value]


def type_as(self: Tensor, other: Tensor) -> Tensor:
    """`self` as `other`'s dtype."""
    return type_(self, other.dtype)  # type: ignore[return-value]


def same(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """`self`: `x.cpu()`, `x.cuda()` and `x.clone()` change nothing a program computes
    (tensors are values; a later in-place update of `self` does not reach the clone)."""
    return self._new(self.value)


def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
    """`weights = gradfuse.randn(784, 10) / 28; weights.requires_grad_()` ("What is
    torch.nn really?"): a tensor the host computes now (`eager.host_value`: from
    constants and draws) becomes a trainable leaf, a `Parameter` holding that value,
    which this tensor stands for from here on (its reads, `.grad`, in-place updates)."""
    if requires_grad and self._leaf is None:
        make = type(self).LEAF
        assert make is not None  # (parameter.py sets it)
        self._leaf = make(host_value(self.value, "requires_grad_()"))
    elif not requires_grad and self._leaf is not None:
        self._leaf.requires_grad = False
    return self


def leaf_grad(self: Tensor) -> Tensor | None:
    """`.grad` of a tensor made a leaf by `requires_grad_()` (else None, as PyTorch's
    non-leaf tensors)."""
    return None if self._leaf is None else self._leaf.grad


def set_leaf_grad(self: Tensor, value: Tensor | None) -> None:
    if self._leaf is None:
        raise error(".grad: only a leaf (a Parameter, or a tensor after requires_grad_()) has one")
    self._leaf.grad = value


def item(self: Tensor) -> float:
    """The one element's value, where the host can compute it now (`eager.host_value`:
    from constants and parameters, after `execute()` the trained ones); a tensor computed
    from a feeder's input or in a loop body is received with `Receiver` instead."""
    if self.numel() != 1:
        raise error(f"item(): the tensor has {self.numel()} elements, not one")
    return float(host_value(self.value, "item()").reshape(()))


def numpy(self: Tensor, force: bool = False) -> np.ndarray:
    """The value as a NumPy array, where the host can compute it now (as `item()`)."""
    return host_value(self.value, "numpy()")


def tolist(self: Tensor) -> Any:
    """The value as (nested) Python lists, where the host can compute it now."""
    return host_value(self.value, "tolist()").tolist()


def format_(self: Tensor, spec: str) -> str:
    """`f"{x:.4f}"` of a one-element tensor the host can compute now; `f"{x}"` is its repr."""
    if not spec:
        return repr(self)
    return format(item(self), spec)


# --- in place ---------------------------------------------------------------------------------


def _in_place(self: Tensor, new: Tensor, what: str) -> Tensor:
    """`self` now stands for `new` (`Tensor._set`; a `Parameter` assigns it)."""
    if tuple(new.shape) != tuple(self.shape):
        new = new.broadcast_to(list(self.shape)) if new.ndim <= self.ndim else new
        if tuple(new.shape) != tuple(self.shape):
            raise error(f"{what}: a result of shape {list(new.shape)} cannot update {list(self.shape)}")
    if new.dtype != self.dtype:
        new = type_(new, self.dtype)  # type: ignore[assignment]
    self._set(new, what)
    return self


def add_(self: Tensor, other: Tensor | Scalar, *, alpha: float = 1) -> Tensor:
    """`self += alpha * other`, in place."""
    return _in_place(self, add(self, other, alpha=alpha), "add_")


def sub_(self: Tensor, other: Tensor | Scalar, *, alpha: float = 1) -> Tensor:
    """`self -= alpha * other`, in place."""
    return _in_place(self, sub(self, other, alpha=alpha), "sub_")


def mul_(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """`self *= other`, in place."""
    return _in_place(self, self * other, "mul_")


def div_(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """`self /= other`, in place."""
    return _in_place(self, self / other, "div_")


def copy_(self: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """`self` takes the values of `src` (broadcast, cast to `self`'s dtype)."""
    return _in_place(self, src, "copy_")


def fill_(self: Tensor, value: Tensor | Scalar) -> Tensor:
    """Every element becomes `value` (a number or a 0-d tensor)."""
    if isinstance(value, int | float):
        return _in_place(self, new_full(self, self.shape, value), "fill_")
    return _in_place(self, value, "fill_")


def zero_(self: Tensor) -> Tensor:
    """Every element becomes 0 (`p.grad.zero_()`)."""
    return fill_(self, 0.0)


def clamp_(self: Tensor, min: float | None = None, max: float | None = None) -> Tensor:  # noqa: A002
    """`self.clamp(min, max)`, in place."""
    return _in_place(self, self.clamp(min, max), "clamp_")
