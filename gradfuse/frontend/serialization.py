"""`gradfuse.save` and `gradfuse.load`, as torch's for what gradfuse's state is made of:
`state_dict()`s (NumPy arrays), dicts, lists and numbers, pickled:

    gradfuse.save(model.state_dict(), "model.pth")
    model.load_state_dict(gradfuse.load("model.pth", weights_only=True))

A traced tensor has no value to save (its values exist when the program runs).
"""

from __future__ import annotations

import os
import pickle
from typing import IO, Any

import numpy as np

from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor

Target = str | os.PathLike[str] | IO[bytes]


def _check(obj: Any, where: str) -> None:
    """An error for a traced tensor anywhere in `obj` (a Parameter is saved as its data)."""
    if isinstance(obj, Tensor) and not isinstance(obj, Parameter):
        raise error(
            f"save: {where} is a traced tensor, which has no value until the program runs;"
            " save state_dict()s (NumPy arrays), or what a Receiver received"
        )
    if isinstance(obj, dict):
        for key, value in obj.items():
            _check(value, f"{where}[{key!r}]")
    elif isinstance(obj, list | tuple):
        for k, value in enumerate(obj):
            _check(value, f"{where}[{k}]")


def _plain(obj: Any) -> Any:
    """`obj` with each Parameter replaced by a copy of its host value."""
    if isinstance(obj, Parameter):
        return obj.host.copy()
    if isinstance(obj, np.ndarray):  # (a parameter's `.data`: a plain array)
        return np.asarray(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _plain(v)) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return type(obj)(_plain(v) for v in obj)
    return obj


def save(obj: Any, f: Target, pickle_module: Any = pickle, pickle_protocol: int = 2, **_: Any) -> None:  # fmt: skip
    """Pickles `obj` to the path or binary file `f`."""
    _check(obj, "the object")
    if isinstance(f, str | os.PathLike):
        with open(f, "wb") as out:
            pickle_module.dump(_plain(obj), out, protocol=pickle_protocol)
    else:
        pickle_module.dump(_plain(obj), f, protocol=pickle_protocol)


def load(f: Target, map_location: Any = None, pickle_module: Any = pickle, *, weights_only: bool | None = None, **_: Any) -> Any:  # fmt: skip
    """What `save` wrote to the path or binary file `f` (`map_location` changes nothing:
    the values are host arrays)."""
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as source:
            return pickle_module.load(source)
    return pickle_module.load(f)
