"""`gradfuse.nn`: modules, losses and optimizers (re-exported from `gradfuse.frontend.nn`).

from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
import gradfuse.nn.functional as F
"""

import sys

from gradfuse.frontend.nn import (
    GELU,
    SGD,
    Adam,
    AdamW,
    BCELoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Identity,
    LayerNorm,
    Linear,
    LogSoftmax,
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
    "Module", "Parameter", "Linear", "Sequential", "ModuleList", "Identity", "Sigmoid", "ReLU",
    "Tanh", "Softmax", "LogSoftmax", "GELU", "Dropout", "LayerNorm", "Embedding",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "MSELoss",
    "CrossEntropyLoss", "BCELoss", "Optimizer", "SGD", "Adam", "AdamW", "functional",
]  # fmt: skip
