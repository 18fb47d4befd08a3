"""`torch.nn.init`: initial values of parameters, drawn on the host from
`gradfuse.manual_seed`'s generator and written into the parameter in place (its
`data`), before the program runs; each returns the parameter:

    nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
    nn.init.zeros_(self.decoder.bias)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")

A parameter's `.data` (its host array) is filled in place too; a traced tensor (not a
`Parameter`) has no host value to initialise: an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error, rng

_GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 0.75}
_LINEAR = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "identity")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gain for `nonlinearity` (`"relu"`: sqrt(2))."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in _GAINS:
        raise error(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")
    return _GAINS[nonlinearity]


def _fill(tensor: Any, what: str, draw: Callable[[tuple[int, ...]], np.ndarray]) -> Any:
    """`tensor.data[...] = draw(shape)` for a `Parameter`; a parameter's `.data` (its host
    array: `nn.init.normal_(m.weight.data, 0.0, 0.02)`, as PyTorch's DCGAN writes it) is
    filled in place; anything else is an error."""
    if isinstance(tensor, np.ndarray) and tensor.dtype.kind == "f":
        tensor[...] = draw(tensor.shape)
        return tensor
    if not isinstance(tensor, Parameter):
        raise error(
            f"nn.init.{what}: expected a Parameter (a module's weight or bias), got a"
            f" {type(tensor).__name__}: a traced tensor has no value to initialise"
        )
    tensor.host[...] = draw(tensor.shape)
    return tensor


def _fans(shape: tuple[int, ...], what: str) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight [out, in, *kernel], as PyTorch computes them."""
    if len(shape) < 2:
        raise error(f"nn.init.{what}: fan in and fan out need a tensor of rank >= 2, got {list(shape)}")  # fmt: skip
    field = math.prod(shape[2:])
    return shape[1] * field, shape[0] * field


def uniform_(tensor: Any, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Parameter:
    """Uniform numbers in [a, b)."""
    return _fill(tensor, "uniform_", lambda s: rng().uniform(a, b, s))


def normal_(tensor: Any, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Parameter:
    """Normal numbers of `mean` and `std`."""
    return _fill(tensor, "normal_", lambda s: rng().normal(mean, std, s))


def trunc_normal_(
    tensor: Any, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
    generator: Any = None,
) -> Parameter:  # fmt: skip
    """Normal numbers of `mean` and `std`, drawn again until they fall in [a, b]."""

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        out = rng().normal(mean, std, shape)
        bad = (out < a) | (out > b)
        while bad.any():
            out[bad] = rng().normal(mean, std, int(bad.sum()))
            bad = (out < a) | (out > b)
        return out

    return _fill(tensor, "trunc_normal_", draw)


def constant_(tensor: Any, val: float) -> Parameter:
    """Every element `val`."""
    return _fill(tensor, "constant_", lambda s: np.full(s, val))


def zeros_(tensor: Any) -> Parameter:
    """Every element 0."""
    return constant_(tensor, 0.0)


def ones_(tensor: Any) -> Parameter:
    """Every element 1."""
    return constant_(tensor, 1.0)


def eye_(tensor: Any) -> Parameter:
    """The identity matrix (a rank-2 parameter)."""
    if isinstance(tensor, Parameter) and len(tensor.shape) != 2:
        raise error(f"nn.init.eye_: expects a matrix, got shape {list(tensor.shape)}")
    return _fill(tensor, "eye_", lambda s: np.eye(*s))


def xavier_uniform_(tensor: Any, gain: float = 1.0, generator: Any = None) -> Parameter:
    """Glorot's uniform: bound gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(getattr(tensor, "shape", ()), "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Any, gain: float = 1.0, generator: Any = None) -> Parameter:
    """Glorot's normal: std gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(getattr(tensor, "shape", ()), "xavier_normal_")
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(tensor: Any, a: float, mode: str, nonlinearity: str, what: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise error(f"nn.init.{what}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(getattr(tensor, "shape", ()), what)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def kaiming_uniform_(
    tensor: Any, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
    generator: Any = None,
) -> Parameter:  # fmt: skip
    """He's uniform: bound sqrt(3) * gain / sqrt(fan)."""
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(
    tensor: Any, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
    generator: Any = None,
) -> Parameter:  # fmt: skip
    """He's normal: std gain / sqrt(fan)."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_"))


def orthogonal_(tensor: Any, gain: float = 1.0, generator: Any = None) -> Parameter:
    """A (semi-)orthogonal matrix of the tensor flattened to [rows, rest], times `gain`,
    as PyTorch's: the Q of a normal matrix's QR, its columns' signs those of R's diagonal."""

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) < 2:
            raise error(f"nn.init.orthogonal_: needs a tensor of rank >= 2, got {list(shape)}")
        rows = shape[0]
        cols = math.prod(shape) // rows
        flat = rng().standard_normal((rows, cols))
        flat = flat.T if rows < cols else flat
        q, r = np.linalg.qr(flat)
        q = q * np.sign(np.diag(r))
        q = q.T if rows < cols else q
        return (q * gain).reshape(shape)

    return _fill(tensor, "orthogonal_", draw)
