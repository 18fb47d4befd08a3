"""Neural-network modules with PyTorch's names, layouts and initialisation.

from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

from gradfuse.frontend.nn.layers import Linear, ReLU, Sequential, Sigmoid, Softmax, Tanh
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.optim import SGD
from gradfuse.frontend.parameter import Parameter

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
