"""PyTorch's functions that are a `Tensor` method called on their first argument:
`gradfuse.exp(x)` is `x.exp()`, `gradfuse.sum(x, dim=1)` is `x.sum(dim=1)`,
`gradfuse.bmm(a, b)` is `a.bmm(b)`; code written `torch.exp(0.5 * logvar)` reads as
written with `import gradfuse as torch`:

    std = gradfuse.exp(0.5 * logvar)     # tg.mul, tg.exp2
    scores = gradfuse.bmm(q, k.transpose(1, 2))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradfuse.frontend import tensor_linalg as L
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


def _function(name: str) -> Callable[..., Any]:
    """torch's `name(input, ...)`: `input.name(...)`, or an error for a non-tensor input."""

    def function(input: Tensor, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(input, Tensor):
            raise error(f"{name}(): expected a Tensor, got {type(input).__name__}")
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"`input.{name}(...)`, as torch.{name}."
    return function


exp, exp2, expm1, log, log2, log1p = map(_function, ("exp", "exp2", "expm1", "log", "log2", "log1p"))
sin, cos, tanh, sigmoid, relu = map(_function, ("sin", "cos", "tanh", "sigmoid", "relu"))
sqrt, rsqrt, abs, neg, square = map(_function, ("sqrt", "rsqrt", "abs", "neg", "square"))  # noqa: A001
reciprocal, erf, pow, maximum = map(_function, ("reciprocal", "erf", "pow", "maximum"))  # noqa: A001
sum, mean, var, std, norm = map(_function, ("sum", "mean", "var", "std", "norm"))  # noqa: A001
softmax, log_softmax = map(_function, ("softmax", "log_softmax"))
matmul, mm, bmm = map(_function, ("matmul", "mm", "bmm"))
transpose, permute, reshape, t = map(_function, ("transpose", "permute", "reshape", "t"))
add, sub, mul, div = map(_function, ("add", "sub", "mul", "div"))
eq, ne, gt, ge, lt, le = map(_function, ("eq", "ne", "gt", "ge", "lt", "le"))
isnan, isinf, isfinite = map(_function, ("isnan", "isinf", "isfinite"))
masked_select, nonzero = map(_function, ("masked_select", "nonzero"))
cumsum, flip, roll = map(_function, ("cumsum", "flip", "roll"))
numel, chunk, split = map(_function, ("numel", "chunk", "split"))
topk, sort, argsort, msort = map(_function, ("topk", "sort", "argsort", "msort"))
round, floor, ceil, trunc = map(_function, ("round", "floor", "ceil", "trunc"))  # noqa: A001
atan, asin, acos, tan, atan2 = map(_function, ("atan", "asin", "acos", "tan", "atan2"))
sinh, cosh, asinh, acosh, atanh = map(_function, ("sinh", "cosh", "asinh", "acosh", "atanh"))
arctan, arcsin, arccos, arctan2 = map(_function, ("arctan", "arcsin", "arccos", "arctan2"))
logsumexp, logaddexp, hypot, xlogy = map(_function, ("logsumexp", "logaddexp", "hypot", "xlogy"))
remainder, fmod, floor_divide, frac = map(_function, ("remainder", "fmod", "floor_divide", "frac"))
sign, sgn, lerp, addcmul, addcdiv = map(_function, ("sign", "sgn", "lerp", "addcmul", "addcdiv"))
clamp_min, clamp_max, nan_to_num = map(_function, ("clamp_min", "clamp_max", "nan_to_num"))
true_divide, cumprod, prod = map(_function, ("true_divide", "cumprod", "prod"))
outer, ger, dot, inner, mv = map(_function, ("outer", "ger", "dot", "inner", "mv"))
addmm, addmv, baddbmm, addbmm = map(_function, ("addmm", "addmv", "baddbmm", "addbmm"))
kron, cross, diagonal, diag, trace = map(_function, ("kron", "cross", "diagonal", "diag", "trace"))
index_select, index_add = map(_function, ("index_select", "index_add"))
take_along_dim, repeat_interleave = map(_function, ("take_along_dim", "repeat_interleave"))
logcumsumexp, median, scatter = map(_function, ("logcumsumexp", "median", "scatter"))
std_mean, var_mean = map(_function, ("std_mean", "var_mean"))


def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    """The sum over `dims` of a's and b's (see `tensor_linalg.tensordot`)."""
    return L.tensordot(a, b, dims)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0) -> Tensor:
    """The `p`-norm distance of each row of x1 to each row of x2 (`tensor_linalg.cdist`)."""
    return L.cdist(x1, x2, p)


def rsub(input: Tensor, other: Tensor | float, *, alpha: float = 1) -> Tensor:
    """`other - alpha * input`, as torch.rsub."""
    return other - (input * alpha if alpha != 1 else input)  # type: ignore[no-any-return]


def minimum(input: Tensor, other: Tensor) -> Tensor:
    """The elementwise minimum."""
    return -maximum(-input, -other)  # type: ignore[no-any-return]
