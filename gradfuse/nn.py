"""`gradfuse.nn`: modules and optimizers (re-exported from `gradfuse.frontend.nn`).

from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

from gradfuse.frontend.nn import (
    SGD,
    Linear,
    Module,
    Parameter,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)

__all__ = [
    "Module",
    "Parameter",
    "Linear",
    "Sequential",
    "Sigmoid",
    "ReLU",
    "Tanh",
    "Softmax",
    "SGD",
]
