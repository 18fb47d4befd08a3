"""NumPy dtypes and tg element types: `element_for(np.float32)` is `f32`."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float16Type, Float32Type, Float64Type, IntegerType
from xdsl.ir import Attribute

from gradfuse.frontend.recorder import error

_ELEMENTS: dict[str, Attribute] = {
    "float16": Float16Type(),
    "float32": Float32Type(),
    "float64": Float64Type(),
}


def element_for(dtype: object) -> Attribute:
    """The tg element type of a NumPy dtype (float16/32/64)."""
    name = np.dtype(dtype).name  # type: ignore[call-overload]
    if name not in _ELEMENTS:
        raise error(f"unsupported dtype {name} (float16, float32 or float64)")
    return _ELEMENTS[name]


def numpy_dtype(element: Attribute) -> np.dtype:
    """The NumPy dtype of a tg element type (`bool` for masks)."""
    if isinstance(element, IntegerType):
        return np.dtype(bool) if element.width.data == 1 else np.dtype(f"int{element.width.data}")
    for name, el in _ELEMENTS.items():
        if el == element:
            return np.dtype(name)
    raise TypeError(f"no NumPy dtype for {element}")


def dtype_named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> np.dtype | None:
    """The dtype among the arguments of PyTorch's `to(...)` (`dtype=`, a dtype, or a
    tensor's: `x.to(other)`), else None; a string or a device names a device.
    `dtype_named(("cuda", np.float64), {})` is float64."""
    found = kwargs.get("dtype")
    for arg in args:
        if arg is None or isinstance(arg, str):
            continue
        try:
            found = np.dtype(arg)
        except TypeError:
            continue
    return None if found is None else np.dtype(found)
