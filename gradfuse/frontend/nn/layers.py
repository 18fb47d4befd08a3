"""Layers: `Linear`, `Sequential`, `Flatten` and the activations, with PyTorch's names and init.

model = Sequential(Linear(255, 255), Sigmoid(), Linear(255, 255))
y = model(x)    # x @ W0.T + b0 -> sigmoid -> x @ W2.T + b2
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from gradfuse.frontend.functional import linear
from gradfuse.frontend.functional_conv import flatten
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype, legacy_softmax_dim
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import rng
from gradfuse.frontend.tensor import Tensor


def uniform(bound: float, shape: tuple[int, ...]) -> Parameter:
    """A float32 parameter of `shape` drawn from U(-bound, bound) (`manual_seed`'s generator)."""
    return Parameter(rng().uniform(-bound, bound, size=shape).astype(np.float32))


def kaiming_uniform(shape: tuple[int, ...], bias: int | None) -> tuple[Parameter, Parameter | None]:
    """PyTorch's init of linear and conv layers: weight `shape`, bias `bias` long (None: none),
    both U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = shape[1] times the receptive field.
    `kaiming_uniform((out_features, in_features), out_features)`"""
    fan_in = math.prod(shape[1:])
    bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
    weight = uniform(bound, shape)
    return weight, uniform(bound, (bias,)) if bias is not None else None


class Linear(Module):
    """`y = x @ weight.T + bias`, weight [out, in], both U(-1/sqrt(in), 1/sqrt(in)) like PyTorch.

    `Linear(255, 10)(x)` maps [N, 255] to [N, 10].
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        device_and_dtype("Linear", device, dtype)
        self.in_features = in_features
        self.out_features = out_features
        self.weight, self.bias = kaiming_uniform(
            (out_features, in_features), out_features if bias else None
        )

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class _Numbered(Module):
    """Children named "0", "1", ..., indexed, counted and iterated as a list."""

    def __getitem__(self, index: int) -> Module:
        return list(self.children())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return self.children()


class Sequential(_Numbered):
    """Applies its children in order; they are named "0", "1", ...

    `Sequential(Linear(4, 8), ReLU(), Linear(8, 1))`
    """

    def __init__(self, *modules: Module):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self.children():
            x = m(x)
        return x


class Flatten(Module):
    """Merges dims `start_dim..end_dim` into one. `Flatten()(x)`: [N, C, H, W] -> [N, C*H*W]"""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, x: Tensor) -> Tensor:
        return flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Sigmoid(Module):
    """`1 / (1 + exp(-x))` elementwise (`tg.sigmoid`). `Sigmoid()(x)`"""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class ReLU(Module):
    """`max(x, 0)` elementwise (`tg.relu`). `ReLU()(x)`; `ReLU(True)` (inplace) gives
    the same result (gradfuse's tensors are values: the input keeps its own)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class Tanh(Module):
    """`tanh(x)` elementwise (`tg.tanh`). `Tanh()(x)`"""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Softmax(Module):
    """Softmax along `dim` (`tg.softmax`). `Softmax(dim=-1)(x)`"""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x.softmax(legacy_softmax_dim(self.dim, x.ndim))


class ModuleList(_Numbered):
    """A list of modules named "0", "1", ... (PyTorch's `ModuleList`); it has no forward.

    `layers = ModuleList([Linear(4, 4) for _ in range(3)]); layers[1]`
    """

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        """Adds `module` at the end, named by its index."""
        setattr(self, str(len(self._modules)), module)
        return self


class Identity(Module):
    """Returns its input unchanged (its arguments are ignored, as PyTorch's). `Identity()(x) is x`"""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x
