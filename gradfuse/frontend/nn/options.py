"""PyTorch constructor options that gradfuse takes but supports only some values of.

Every module and optimizer takes PyTorch's parameters in PyTorch's order, so
`nn.ReLU(True)` and `nn.Dropout(0.5, True)` work as written; a value gradfuse
cannot honour is one error naming the class and the option, never ignored:

    only("Embedding", "padding_idx", padding_idx, None)   # Embedding: padding_idx=0 is not ...
    device_and_dtype("Linear", device, dtype)              # None, "cpu", "cuda"; float32
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradfuse.frontend.recorder import error


def only(owner: str, name: str, value: Any, *allowed: Any) -> None:
    """Raises unless `value` is one of `allowed` (compared with ==)."""
    if not any(value is a or (a is not None and value == a) for a in allowed):
        choices = " or ".join(repr(a) for a in allowed)
        raise error(f"{owner}: {name}={value!r} is not supported by gradfuse (only {choices})")


def device_and_dtype(owner: str, device: Any = None, dtype: Any = None) -> None:
    """Accepts what changes nothing: any CPU or CUDA device (gradfuse places the program
    itself, by backend) and float32 data; anything else is an error."""
    kind = str(getattr(device, "type", device)).split(":")[0]
    if device is not None and kind not in ("cpu", "cuda"):
        raise error(f"{owner}: device={device!r} is not supported (gradfuse places the program)")
    if dtype is not None and _dtype_name(dtype) != "float32":
        raise error(f"{owner}: dtype={dtype!r} is not supported (parameters are float32)")


def _dtype_name(dtype: Any) -> str:
    """`float32` for np.float32, "float32" and torch.float32 alike."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype).rpartition(".")[2]  # torch.float32


def legacy_softmax_dim(dim: int | None, ndim: int) -> int:
    """`dim`, else PyTorch's choice for a softmax without one: 0 for 0-, 1- and 3-d
    inputs, else 1."""
    if dim is not None:
        return dim
    return 0 if ndim in (0, 1, 3) else 1


def legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """PyTorch's reduction from its deprecated `size_average` and `reduce` arguments."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"
