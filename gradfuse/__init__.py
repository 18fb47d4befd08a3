"""gradfuse: record a model and its training loop in Python, compile it, run it.

from gradfuse import execute, ir_for, Feeder, Receiver, print_graph
from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

import numpy as _np

from gradfuse.frontend.creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand_like,
    randn,
    randn_like,
    tensor,
    tril,
    triu,
    zeros,
    zeros_like,
)
from gradfuse.frontend.device import device
from gradfuse.frontend.einsum import einsum
from gradfuse.frontend.functional import (
    cat,
    concat,
    constant,
    dropout,
    erf,
    gather,
    masked_fill,
    rand,
    scatter_add,
    squeeze,
    stack,
    unsqueeze,
)
from gradfuse.frontend.functional_conv import flatten
from gradfuse.frontend.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from gradfuse.frontend.loops import scan, steps
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import manual_seed
from gradfuse.frontend.serialization import load, save
from gradfuse.frontend.tensor import Tensor, where
from gradfuse.frontend.tensor_reduce import amax, amin, argmax, argmin, clamp
from gradfuse.frontend.tensor_reduce import max_ as max  # noqa: A004 (torch.max, as torch has it)
from gradfuse.frontend.tensor_reduce import min_ as min  # noqa: A004
from gradfuse.frontend.torch_functions import (
    abs,
    acos,
    acosh,
    add,
    addcdiv,
    addcmul,
    arccos,
    arcsin,
    arctan,
    arctan2,
    argsort,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bmm,
    ceil,
    chunk,
    clamp_max,
    clamp_min,
    cos,
    cosh,
    cumprod,
    cumsum,
    div,
    eq,
    exp,
    exp2,
    expm1,
    flip,
    floor,
    floor_divide,
    fmod,
    frac,
    ge,
    gt,
    hypot,
    isfinite,
    isinf,
    isnan,
    le,
    lerp,
    log,
    log1p,
    log2,
    log_softmax,
    logaddexp,
    logsumexp,
    lt,
    masked_select,
    matmul,
    maximum,
    mean,
    minimum,
    mm,
    msort,
    mul,
    nan_to_num,
    ne,
    neg,
    nonzero,
    norm,
    numel,
    permute,
    pow,
    prod,
    reciprocal,
    relu,
    remainder,
    reshape,
    roll,
    round,
    rsqrt,
    rsub,
    sgn,
    sigmoid,
    sign,
    sin,
    sinh,
    softmax,
    sort,
    split,
    sqrt,
    square,
    std,
    sub,
    sum,
    t,
    tan,
    tanh,
    topk,
    transpose,
    true_divide,
    trunc,
    var,
    xlogy,
)
from gradfuse.frontend.tracing import (
    Compiled,
    Feeder,
    Receiver,
    compile,
    execute,
    ir_for,
    ir_text,
    print_graph,
    reset,
)

__all__ = [
    "Tensor", "Parameter", "where", "Feeder", "Receiver", "execute", "ir_for", "ir_text",
    "print_graph", "reset", "manual_seed", "compile", "Compiled", "constant", "erf", "gather",
    "scatter_add", "rand", "dropout", "cat", "concat", "stack", "squeeze", "unsqueeze",
    "masked_fill", "flatten", "max", "min", "amax", "amin", "argmax", "argmin", "clamp",
    "scan", "steps", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "inference_mode",
    # torch's creation functions (gradfuse/frontend/creation.py)
    "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "zeros_like",
    "ones_like", "full_like", "empty_like", "arange", "linspace", "eye", "triu", "tril",
    "randn", "randn_like", "rand_like",
    # torch's functions that are methods (gradfuse/frontend/torch_functions.py)
    "abs", "add", "bmm", "chunk", "cos", "div", "eq", "exp", "exp2", "expm1", "ge", "gt",
    "le", "log", "log1p", "log2", "log_softmax", "lt", "matmul", "maximum", "mean",
    "minimum", "mm", "mul", "ne", "neg", "norm", "numel", "permute", "pow", "reciprocal",
    "relu", "reshape", "rsqrt", "sigmoid", "sin", "softmax", "split", "sqrt", "square",
    "std", "sub", "sum", "t", "tanh", "transpose", "var", "round", "floor", "ceil", "trunc",
    "topk", "sort", "argsort", "msort", "isnan", "isinf", "isfinite", "masked_select", "nonzero", "cumsum", "flip", "roll", "save", "load", "einsum",
    "acos", "acosh", "addcdiv", "addcmul", "arccos", "arcsin", "arctan", "arctan2", "asin",
    "asinh", "atan", "atan2", "atanh", "clamp_max", "clamp_min", "cosh", "cumprod",
    "floor_divide", "fmod", "frac", "hypot", "lerp", "logaddexp", "logsumexp", "nan_to_num",
    "prod", "remainder", "rsub", "sgn", "sign", "sinh", "tan", "true_divide", "xlogy",
    # torch's dtype names, and its submodules as attributes (`torch.nn.Linear`)
    "float16", "half", "float32", "float", "float64", "double", "int32", "int64", "long",
    "bool", "nn", "optim", "cuda", "accelerator", "device",
]  # fmt: skip

float16 = half = _np.float16
float32 = float = _np.float32  # noqa: A001
float64 = double = _np.float64
int32, int64, long, bool = _np.int32, _np.int64, _np.int64, _np.bool_  # noqa: A001
"""PyTorch's dtype names: NumPy's dtypes. gradfuse computes in floats: an integer dtype
given to a creation function holds its integers in float32 (exact to 2**24)."""

from gradfuse import accelerator, cuda, nn, optim  # noqa: E402 (`torch.nn.Linear`)
