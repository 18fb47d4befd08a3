"""gradfuse: record a model and its training loop in Python, compile it, run it.

from gradfuse import execute, ir_for, Feeder, Receiver, print_graph
from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

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
from gradfuse.frontend.tensor import Tensor, where
from gradfuse.frontend.tensor_reduce import amax, amin, argmax, argmin, clamp
from gradfuse.frontend.tensor_reduce import max_ as max  # noqa: A004 (torch.max, as torch has it)
from gradfuse.frontend.tensor_reduce import min_ as min  # noqa: A004
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
]  # fmt: skip
