"""`gradfuse.nn`: modules, losses and optimizers (re-exported from `gradfuse.frontend.nn`).

from gradfuse.nn import Conv2d, BatchNorm2d, Linear, Sequential, Sigmoid, SGD
import gradfuse.nn.functional as F
"""

import sys

from gradfuse.frontend.nn import (
    GELU,
    SGD,
    Adam,
    AdamW,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    BCELoss,
    Buffer,
    Conv2d,
    ConvTranspose2d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool2d,
    Module,
    ModuleList,
    MSELoss,
    MultiheadAttention,
    Optimizer,
    Parameter,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
    TransformerEncoder,
    TransformerEncoderLayer,
    functional,
)

sys.modules[f"{__name__}.functional"] = functional  # `import gradfuse.nn.functional as F`

__all__ = [
    "Module", "Parameter", "Buffer", "Linear", "Sequential", "ModuleList", "Identity", "Flatten",
    "Sigmoid", "ReLU", "LeakyReLU", "Tanh", "Softmax", "LogSoftmax", "GELU", "Dropout",
    "LayerNorm", "BatchNorm1d", "BatchNorm2d", "Conv2d", "ConvTranspose2d", "MaxPool2d",
    "AvgPool2d", "AdaptiveAvgPool2d", "Embedding", "MultiheadAttention",
    "TransformerEncoderLayer", "TransformerEncoder", "MSELoss", "CrossEntropyLoss", "BCELoss",
    "Optimizer", "SGD", "Adam", "AdamW", "functional",
]  # fmt: skip
