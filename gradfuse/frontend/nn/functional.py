"""`gradfuse.nn.functional` (PyTorch's `F`): the functions of `gradfuse.frontend.functional`,
the convolution, pooling and batch-norm ones of `gradfuse.frontend.functional_conv`, the
activations of `gradfuse.frontend.functional_act`, the losses of
`gradfuse.frontend.functional_loss` and `functional_margin`, the normalizations of
`gradfuse.frontend.functional_norm` and the shuffles, pads and 1-d pools of
`gradfuse.frontend.functional_spatial`.

import gradfuse.nn.functional as F
y = F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), 2)
"""

from gradfuse.frontend.functional import *  # noqa: F403
from gradfuse.frontend.functional import __all__ as _base
from gradfuse.frontend.functional_act import *  # noqa: F403
from gradfuse.frontend.functional_act import __all__ as _act
from gradfuse.frontend.functional_conv import *  # noqa: F403
from gradfuse.frontend.functional_conv import __all__ as _conv
from gradfuse.frontend.functional_loss import *  # noqa: F403
from gradfuse.frontend.functional_loss import __all__ as _loss
from gradfuse.frontend.functional_margin import *  # noqa: F403
from gradfuse.frontend.functional_margin import __all__ as _margin
from gradfuse.frontend.functional_norm import *  # noqa: F403
from gradfuse.frontend.functional_norm import __all__ as _norm
from gradfuse.frontend.functional_spatial import *  # noqa: F403
from gradfuse.frontend.functional_spatial import __all__ as _spatial
from gradfuse.frontend.nn.sparse import embedding
from gradfuse.frontend.tensor import Tensor


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """`max(x, 0)` elementwise (`tg.relu`). `F.relu(x)`; `inplace=True` gives the same
    result (gradfuse's tensors are values: the input keeps its own), as `nn.ReLU(True)`."""
    return input.relu()


def sigmoid(input: Tensor) -> Tensor:
    """`1 / (1 + exp(-x))` elementwise (`tg.sigmoid`). `F.sigmoid(x)`"""
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    """`tanh(x)` elementwise (`tg.tanh`). `F.tanh(x)`"""
    return input.tanh()


__all__ = [
    *_base,
    *_act,
    *_loss,
    *_margin,
    *_norm,
    *_spatial,
    *(n for n in _conv if n not in ("pair", "ntuple")),
    "relu",
    "sigmoid",
    "tanh",
    "embedding",
]
