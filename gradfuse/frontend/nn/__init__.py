"""Neural-network modules with PyTorch's names, layouts and initialisation.

from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
"""

from gradfuse.frontend.nn import functional, init, utils
from gradfuse.frontend.nn.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
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
    Softmin,
    Softplus,
    Softsign,
    Unflatten,
    Upsample,
)
from gradfuse.frontend.nn.batchnorm import BatchNorm1d, BatchNorm2d, SyncBatchNorm
from gradfuse.frontend.nn.buffer import Buffer
from gradfuse.frontend.nn.conv import Conv1d, Conv2d, ConvTranspose2d
from gradfuse.frontend.nn.distance import Bilinear, CosineSimilarity, PairwiseDistance
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
from gradfuse.frontend.nn.loss_margin import (
    CosineEmbeddingLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    MarginRankingLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    PoissonNLLLoss,
    SoftMarginLoss,
    TripletMarginLoss,
)
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.normalization import GroupNorm, InstanceNorm2d, LayerNorm
from gradfuse.frontend.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from gradfuse.frontend.nn.recurrent import GRU, LSTM, RNN
from gradfuse.frontend.nn.recurrent_cells import GRUCell, LSTMCell, RNNCell
from gradfuse.frontend.nn.sparse import Embedding
from gradfuse.frontend.nn.spatial import (
    AdaptiveAvgPool1d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    CircularPad1d,
    CircularPad2d,
    ConstantPad1d,
    ConstantPad2d,
    MaxPool1d,
    PixelShuffle,
    PixelUnshuffle,
    ReflectionPad1d,
    ReflectionPad2d,
    ReplicationPad1d,
    ReplicationPad2d,
    Unfold,
    ZeroPad1d,
    ZeroPad2d,
)
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
    "SELU", "CELU", "GLU", "Softmin", "Bilinear", "CosineSimilarity", "PairwiseDistance",
    "MarginRankingLoss", "HingeEmbeddingLoss", "CosineEmbeddingLoss", "SoftMarginLoss",
    "TripletMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "MultiLabelSoftMarginLoss",
    "MultiMarginLoss", "PixelShuffle", "PixelUnshuffle", "ReflectionPad1d", "ReflectionPad2d",
    "ReplicationPad1d", "ReplicationPad2d", "CircularPad1d", "CircularPad2d", "ZeroPad1d",
    "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "MaxPool1d", "AvgPool1d",
    "AdaptiveAvgPool1d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "Unfold",
]  # fmt: skip
