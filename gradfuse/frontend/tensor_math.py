"""PyTorch's elementwise math that is a composite of tg ops, as `Tensor` methods (and
`gradfuse.*` functions), each exact where PyTorch's is and with PyTorch's gradient:

    x.asin()             # tg.atan2(x, sqrt((1 - x)(1 + x))): +-pi/2 at +-1, NaN beyond
    x.sinh()             # (expm1(x) - expm1(-x)) / 2: exact near 0
    x.logsumexp(1)       # m + log(sum(exp(x - m))), m the detached max (0 where infinite)
    a % b, a // b        # a - b floor(a / b), floor(a / b): Python's signs, as PyTorch's
    x.lerp(y, 0.3)       # PyTorch's two-sided formula: exact at weight 0 and 1

Where a composite takes two branches (`tg.where`), each branch gets inputs on which it
is finite (a clamp), so that the branch not taken adds 0 to the gradient, not NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import Float32Type

from gradfuse.dialects.tg_builder import LN_2, LOG2_E, element_type
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor_methods import floor, trunc

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Scalar, Tensor

F32 = Float32Type()
BIG = 2.0**12
"""From here on, `asinh(x) = ln(2x)` and `acosh(x) = ln(2x)` to float64's precision
(the next term is 1 / (4 x^2) = 2^-26 relative), and x^2 no longer overflows below."""


def _sign_one(x: Tensor) -> Tensor:
    """-1 where x < 0, else 1: a constant of the mask (no gradient), for odd functions
    computed on `x * sign` so that their gradient at 0 is the function's, not abs's 0."""
    return 1.0 - (x.detach() < 0.0).float().to(x.dtype) * 2.0


# --- exponentials and magnitudes ---------------------------------------------------------


def exp(x: Tensor) -> Tensor:
    """`e ** x`, recorded as `exp2(x * log2(e))`."""
    return (x * LOG2_E).exp2()


def log(x: Tensor) -> Tensor:
    """Natural log, recorded as `log2(x) * ln(2)`."""
    return x.log2() * LN_2


def rsqrt(x: Tensor) -> Tensor:
    """`1 / sqrt(x)`."""
    return x.sqrt().reciprocal()


def abs_(x: Tensor) -> Tensor:
    """`|x|`, recorded as `0 - x * m` with `m = (x < 0) - (x > 0)`, minus its sign
    (`0 - ...` makes -0 +0): its gradient is the sign, 0 at 0 (PyTorch's)."""
    v = x.value
    minus = B.sub(B.cast(B.cmplt(v, 0.0), F32), B.cast(B.cmplt(0.0, v), F32))
    return x._new(B.sub(0.0, B.mul(v, B.cast(minus, element_type(v)))))


# --- trigonometric and hyperbolic -------------------------------------------------------


def atan(x: Tensor) -> Tensor:
    """`atan(x)`: `tg.atan2(x, 1)`."""
    return x.atan2(1.0)


def asin(x: Tensor) -> Tensor:
    """`asin(x)`: `atan2(x, sqrt((1 - x)(1 + x)))`, exact near +-1 (no 1 - x^2)."""
    return x.atan2(((1.0 - x) * (1.0 + x)).sqrt())


def acos(x: Tensor) -> Tensor:
    """`acos(x)`: `atan2(sqrt((1 - x)(1 + x)), x)`, exact near 1 (no pi/2 - asin)."""
    return ((1.0 - x) * (1.0 + x)).sqrt().atan2(x)


def tan(x: Tensor) -> Tensor:
    """`sin(x) / cos(x)`."""
    return x.sin() / x.cos()


def sinh(x: Tensor) -> Tensor:
    """`(expm1(x) - expm1(-x)) / 2`: exact near 0, where `(e^x - e^-x) / 2` cancels."""
    return (x.expm1() - (-x).expm1()) * 0.5


def cosh(x: Tensor) -> Tensor:
    """`(e^x + e^-x) / 2`."""
    return (x.exp() + (-x).exp()) * 0.5


def asinh(x: Tensor) -> Tensor:
    """`sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2)))` for `a = |x|` (exact near 0; taken
    as `x * sign`, so its gradient at 0 is 1), `sign(x) (ln a + ln 2)` from `BIG` on."""
    s = _sign_one(x)
    a = x * s
    small = a.clamp(max=BIG)
    near = (small + small * small / (1.0 + (small * small + 1.0).sqrt())).log1p()
    far = a.clamp(min=BIG).log() + math.log(2.0)
    return s * x._where(a.detach() < BIG, near, far)


def acosh(x: Tensor) -> Tensor:
    """`log1p(t + sqrt(t (t + 2)))` for `t = x - 1` (exact near 1), `ln x + ln 2` from
    `BIG` on; NaN below 1."""
    t = (x - 1.0).clamp(max=BIG)
    near = (t + (t * (t + 2.0)).sqrt()).log1p()
    far = x.clamp(min=BIG).log() + math.log(2.0)
    return x._where(x.detach() < BIG, near, far)


def atanh(x: Tensor) -> Tensor:
    """`log1p(2x / (1 - x)) / 2`: exact near 0, +-inf at +-1, NaN beyond."""
    return (x * 2.0 / (1.0 - x)).log1p() * 0.5


# --- sums of exponentials -----------------------------------------------------------------


def _finite_or_zero(m: Tensor) -> Tensor:
    """`m` where finite, else 0: a shift that leaves `x - m` finite where x is."""
    return m._where(m.isfinite(), m, 0.0)


def logsumexp(x: Tensor, dim: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """`log(sum(exp(x), dim))` without overflow: `m + log(sum(exp(x - m)))`, m the max
    along `dim`, detached (the gradient is softmax(x), and it does not depend on m) and 0
    where infinite (all -inf gives -inf, an inf gives inf, as PyTorch's)."""
    m = _finite_or_zero(x.amax(dim, keepdim=True).detach())
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    if keepdim:
        return out
    dims = B.normalize_dims(dim if not isinstance(dim, int) else [dim], x.ndim, "logsumexp")
    return out.reshape([n for k, n in enumerate(out.shape) if k not in dims])


def logaddexp(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """`log(e^a + e^b)`: `m + log(e^(a - m) + e^(b - m))`, m the detached maximum (0 where
    infinite); at a tie each side gets half the gradient, as PyTorch's."""
    m = _finite_or_zero(a.maximum(b).detach())
    return ((a - m).exp() + (b - m).exp()).log() + m


def hypot(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """`sqrt(a^2 + b^2)`."""
    return (a * a + b * b).sqrt()


def xlogy(x: Tensor, y: Tensor | Scalar) -> Tensor:
    """`x log(y)`, 0 where x is 0 and y is no NaN (the entropy's `0 log 0 = 0`); the
    gradients are PyTorch's: 0 to x there, and `x / y` to y (NaN at x = y = 0)."""
    zero = x.detach() == 0.0
    if not isinstance(y, int | float):
        zero = zero & ~y.isnan()
    log_y = y.log() if not isinstance(y, int | float) else (x.detach() * 0.0 + y).log()
    return x._where(zero, 0.0, x * log_y)


# --- division and rounding ------------------------------------------------------------------


def remainder(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """`a - b floor(a / b)`: the sign of b, as Python's `%` and PyTorch's `remainder`;
    gradient 1 to a and `-floor(a / b)` to b."""
    return a - b * floor(a / b).detach()


def rremainder(a: Tensor, b: Scalar) -> Tensor:
    """`b % a` for a number b."""
    return remainder(a * 0.0 + b, a)


def fmod(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """`a - b trunc(a / b)`: the sign of a, as C's `fmod`."""
    return a - b * trunc(a / b).detach()


def floor_divide(a: Tensor, b: Tensor | Scalar) -> Tensor:
    """`floor(a / b)`, as Python's `//` and PyTorch's `floor_divide` (no gradient)."""
    return floor(a / b)


def rfloor_divide(a: Tensor, b: Scalar) -> Tensor:
    """`b // a` for a number b."""
    return floor(b / a)


def frac(x: Tensor) -> Tensor:
    """`x - trunc(x)`: the sign of x (gradient 1)."""
    return x - trunc(x).detach()


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 as x is negative, 0 or positive; NaN stays NaN (gradient 0)."""
    d = x.detach()
    s = (d > 0.0).float().to(x.dtype) - (d < 0.0).float().to(x.dtype)
    return x._where(d.isnan(), d, s)


# --- blends -----------------------------------------------------------------------------------


def lerp(start: Tensor, end: Tensor | Scalar, weight: Tensor | Scalar) -> Tensor:
    """`start + weight (end - start)`, PyTorch's way: from the end for weights of 0.5 and
    more, so that weight 1 gives `end` exactly."""
    if not isinstance(weight, int | float) and not hasattr(weight, "abs"):
        raise error(f"lerp: weight must be a number or a Tensor, got {type(weight).__name__}")
    diff = end - start
    if isinstance(weight, int | float):
        return start + diff * weight if abs(weight) < 0.5 else end - diff * (1.0 - weight)
    return start._where(weight.abs() < 0.5, start + diff * weight, end - diff * (1.0 - weight))


def addcmul(x: Tensor, t1: Tensor, t2: Tensor, *, value: float = 1) -> Tensor:
    """`x + value * t1 * t2`."""
    return x + t1 * t2 * value if value != 1 else x + t1 * t2


def addcdiv(x: Tensor, t1: Tensor, t2: Tensor, *, value: float = 1) -> Tensor:
    """`x + value * t1 / t2`."""
    return x + t1 / t2 * value if value != 1 else x + t1 / t2


def clamp_min(x: Tensor, min: Tensor | Scalar) -> Tensor:  # noqa: A002
    """`x.clamp(min=min)`."""
    return x.clamp(min=min)


def clamp_max(x: Tensor, max: Tensor | Scalar) -> Tensor:  # noqa: A002
    """`x.clamp(max=max)`."""
    return x.clamp(max=max)


def nan_to_num(
    x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
) -> Tensor:
    """NaN as `nan`, +-inf as `posinf`/`neginf` (the dtype's largest finite values unless
    given); the gradient passes where x is finite."""
    top = float(np.finfo(x.dtype).max)
    out = x._where(x.isnan(), nan, x)
    out = x._where(x == math.inf, top if posinf is None else posinf, out)
    return x._where(x == -math.inf, -top if neginf is None else neginf, out)
