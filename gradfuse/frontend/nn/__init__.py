"""Neural-network modules with PyTorch's names, layouts and initialisation.

from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

from gradfuse.frontend import functional
from gradfuse.frontend.nn.activation import GELU, Dropout, LogSoftmax
from gradfuse.frontend.nn.layers import (
    Identity,
    Linear,
    ModuleList,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)
from gradfuse.frontend.nn.loss import BCELoss, CrossEntropyLoss, MSELoss
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.normalization import LayerNorm
from gradfuse.frontend.nn.sparse import Embedding
from gradfuse.frontend.nn.transformer import (
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from gradfuse.frontend.optim import SGD, Adam, AdamW, Optimizer
from gradfuse.frontend.parameter import Parameter

__all__ = [
    "Module", "Parameter", "Linear", "Sequential", "ModuleList", "Identity", "Sigmoid", "ReLU",
    "Tanh", "Softmax", "LogSoftmax", "GELU", "Dropout", "LayerNorm", "Embedding",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "MSELoss",
    "CrossEntropyLoss", "BCELoss", "Optimizer", "SGD", "Adam", "AdamW", "functional",
]  # fmt: skip
