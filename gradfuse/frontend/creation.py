"""PyTorch's tensor creation functions: constants (`tg.constant`), random numbers
(`tg.random`), and trainable leaves where `requires_grad=True` asks for one:

    pe = gradfuse.zeros(max_len, d_model)                 # tg.constant 0.0
    position = gradfuse.arange(0, max_len, dtype=gradfuse.float).unsqueeze(1)
    mask = gradfuse.triu(gradfuse.ones(8, 8), diagonal=1) # a dense constant, masked
    eps = gradfuse.randn_like(std)                        # new normal numbers each step
    b = gradfuse.zeros(10, requires_grad=True)            # a Parameter (a trainable leaf)

gradfuse computes in floats: integer dtypes (`gradfuse.long`, PyTorch's default for
`arange(4)` and `tensor([1, 2])`) give float32 tensors that hold the integers (exact to
2**24), as gradfuse's indices and class labels are. `device=` is accepted and changes
nothing (`execute()` chooses where the program runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradfuse.frontend.dtypes import element_for
from gradfuse.frontend.functional import rand
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error, rng
from gradfuse.frontend.tensor import Tensor
from gradfuse.frontend.tensor_shape import dims_arg


def _dtype(dtype: Any, default: Any = np.float32) -> np.dtype:
    """The float dtype gradfuse holds `dtype` in: an integer dtype's values are held in
    float32, exactly (to 2**24)."""
    d = np.dtype(default if dtype is None else dtype)
    return np.dtype(np.float32) if d.kind in "iub" else d


def _integral(values: np.ndarray, dtype: Any) -> np.ndarray:
    """`values` truncated toward zero where `dtype` is an integer dtype (as PyTorch's
    `tensor([2.7], dtype=torch.long)` is 2), else as they are."""
    if dtype is not None and np.dtype(dtype).kind in "iu" and values.dtype.kind == "f":
        return np.trunc(values)
    return values


def _made(values: np.ndarray, requires_grad: bool) -> Tensor:
    """`values` as a constant, or as a trainable `Parameter` where `requires_grad`."""
    if requires_grad:
        return Parameter(values)
    return Tensor(B.dense(values, element_for(values.dtype)))


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of `data` (numbers, nested lists, a NumPy array) (`tg.constant`): float32
    for Python numbers, as PyTorch's default; an array's own float dtype.
    `gradfuse.tensor([1, 2, 3])`"""
    if isinstance(data, Tensor):
        raise error("tensor(): got a traced Tensor; use x.detach() (or x.clone()) for a copy")
    arr = np.asarray(data)
    if arr.dtype.kind not in "iubf":
        raise error(f"tensor(): expected numbers, got an array of {arr.dtype}")
    if dtype is None:  # Python numbers: PyTorch's default float32; an array keeps its dtype
        dtype = arr.dtype if isinstance(data, np.ndarray | np.generic) else np.float32
    return _made(_integral(arr, dtype).astype(_dtype(dtype)), requires_grad)


as_tensor = tensor


def from_numpy(array: np.ndarray) -> Tensor:
    """A constant of `array` (its values at this point: it is not shared afterwards)."""
    return tensor(array)


def full(
    size: Sequence[int], fill_value: float, *, dtype: Any = None, device: Any = None,
    requires_grad: bool = False, **_: Any,
) -> Tensor:  # fmt: skip
    """A tensor of `size` filled with `fill_value`."""
    values = _integral(np.full(tuple(size), fill_value, np.float64), dtype)
    return _made(values.astype(_dtype(dtype)), requires_grad)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, **_: Any) -> Tensor:
    """Zeros of `size`: `zeros(2, 3)`, `zeros((2, 3))`."""
    return full(list(dims_arg(size)), 0.0, dtype=dtype, requires_grad=requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, **_: Any) -> Tensor:
    """Ones of `size`."""
    return full(list(dims_arg(size)), 1.0, dtype=dtype, requires_grad=requires_grad)


empty = zeros  # (PyTorch's values are whatever memory held: zeros are as good)


def full_like(input: Tensor, fill_value: float, *, dtype: Any = None, **kwargs: Any) -> Tensor:
    """`fill_value` in the shape (and dtype) of `input`."""
    return full(input.shape, fill_value, dtype=dtype or input.dtype, **kwargs)


def zeros_like(input: Tensor, **kwargs: Any) -> Tensor:
    """Zeros in the shape of `input`."""
    return full_like(input, 0.0, **kwargs)


def ones_like(input: Tensor, **kwargs: Any) -> Tensor:
    """Ones in the shape of `input`."""
    return full_like(input, 1.0, **kwargs)


empty_like = zeros_like


def arange(start: float, end: float | None = None, step: float = 1, *, dtype: Any = None, **kwargs: Any) -> Tensor:  # fmt: skip
    """`start, start + step, ...` below `end` (`arange(n)`: 0 to n - 1)."""
    if end is None:
        start, end = 0, start
    values = np.arange(start, end, step)
    return tensor(values, dtype=dtype or values.dtype, requires_grad=kwargs.get("requires_grad", False))  # fmt: skip


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, **kwargs: Any) -> Tensor:
    """`steps` evenly spaced values from `start` to `end`, both included."""
    values = np.linspace(start, end, steps, dtype=np.float64)
    return tensor(values, dtype=dtype or np.float32, requires_grad=kwargs.get("requires_grad", False))  # fmt: skip


def eye(n: int, m: int | None = None, *, dtype: Any = None, **kwargs: Any) -> Tensor:
    """The identity matrix [n, m]."""
    return tensor(np.eye(n, m), dtype=dtype or np.float32, requires_grad=kwargs.get("requires_grad", False))  # fmt: skip


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """`input` on and above the `diagonal`, 0 below (a mask's zeros stay 0, -inf too)."""
    return input.triu(diagonal)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """`input` on and below the `diagonal`, 0 above."""
    return input.tril(diagonal)


def randn(*size: Any, dtype: Any = None, requires_grad: bool = False, **_: Any) -> Tensor:
    """Standard normal numbers, new each time the program reaches them (Box-Muller on
    `gradfuse.rand`'s uniform ones: `sqrt(-2 ln(1 - u)) * cos(2 pi v)`). With
    `requires_grad=True`, a `Parameter` drawn once from `gradfuse.manual_seed`'s
    generator (an initial value, as PyTorch's scratch-built models use it)."""
    shape = [int(d) for d in dims_arg(size)]
    if requires_grad:
        return Parameter(rng().standard_normal(shape).astype(_dtype(dtype)))
    uv = rand(2, *shape)
    out = ((1.0 - uv[0]).log() * -2.0).sqrt() * (uv[1] * (2 * math.pi)).cos()
    return out if dtype is None else out.to(_dtype(dtype))


def randn_like(input: Tensor, **kwargs: Any) -> Tensor:
    """Standard normal numbers in the shape of `input`."""
    return randn(*input.shape, **kwargs)


def rand_like(input: Tensor, **kwargs: Any) -> Tensor:
    """Uniform [0, 1) numbers in the shape of `input`."""
    return rand(*input.shape)
