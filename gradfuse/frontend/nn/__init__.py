"""Neural-network modules with PyTorch's names, layouts and initialisation.

from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

from gradfuse.frontend.nn import functional, init, utils
from gradfuse.frontend.nn.activation import (
    ELU,
    GELU,
    Dropout,
    Dropout2d,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU6,
    SiLU,
    Softmax2d,
    Softplus,
    Softsign,
    Unflatten,
    Upsample,
)
from gradfuse.frontend.nn.batchnorm import BatchNorm1d, BatchNorm2d, SyncBatchNorm
from gradfuse.frontend.nn.buffer import Buffer
from gradfuse.frontend.nn.conv import Conv1d, Conv2d, ConvTranspose2d
from gradfuse.frontend.nn.layers import (
    Flatten,
    Identity,
    Linear,
    ModuleList,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)
from gradfuse.frontend.nn.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.normalization import GroupNorm, InstanceNorm2d, LayerNorm
from gradfuse.frontend.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from gradfuse.frontend.nn.recurrent import GRU, LSTM, RNN
from gradfuse.frontend.nn.recurrent_cells import GRUCell, LSTMCell, RNNCell
from gradfuse.frontend.nn.sparse import Embedding
from gradfuse.frontend.nn.transformer import (
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from gradfuse.frontend.nn.transformer_decoder import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
)
from gradfuse.frontend.optim import SGD, Adam, AdamW, Optimizer
from gradfuse.frontend.parameter import Parameter

__all__ = [
    "Module", "Parameter", "Buffer", "Linear", "Sequential", "ModuleList", "Identity",
    "Flatten", "Sigmoid", "ReLU", "LeakyReLU", "Tanh", "Softmax", "LogSoftmax", "GELU",
    "Dropout", "Dropout2d", "SiLU", "ELU", "Softplus", "Hardtanh", "PReLU", "Upsample",
    "GroupNorm", "InstanceNorm2d", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "SyncBatchNorm",
    "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "Embedding", "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "RNN",
    "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
    "GRU", "LSTM", "RNNCell", "GRUCell", "LSTMCell", "MSELoss", "CrossEntropyLoss", "NLLLoss",
    "BCELoss", "BCEWithLogitsLoss", "Optimizer", "SGD", "Adam", "AdamW", "functional", "utils",
    "init", "ReLU6", "Hardswish", "Mish", "Softsign", "LogSigmoid", "Unflatten", "L1Loss",
    "SmoothL1Loss", "HuberLoss", "KLDivLoss", "Softmax2d",
]  # fmt: skip
