"""`x[key]` (`tg.slice`, `tg.reshape`; a loop step's slot; `x[range(n), target]`) and
`x[key] = value`, as PyTorch's, composed of tg ops (no op of its own): the tensor
then stands for a new value (as its in-place methods make it; a `Parameter` assigns it,
under `no_grad()`), where the elements `key` selects are `value`'s:

    pe[:, 0::2] = gradfuse.sin(position * div_term)   # word_language_model's table
    scores[mask] = float("-inf")                        # a mask: tg.where

    %s = tg.scatter_add %index, %value dim=0 : tensor<N>   (index: the flat positions
    %y = tg.where %covered, %s', %x                          that key selects, NumPy's)

A key of ints, slices (positive steps), None and ... selects the positions NumPy's
basic indexing selects, and `value` broadcasts to their shape; its gradient is the
gradient at those positions, `x`'s is the gradient elsewhere (PyTorch's). A mask of
`x`'s shape, or of its leading dims, takes a number or a one-element tensor.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, i1
from xdsl.ir import SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.dialects.tg_builder import element_type
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import Step, emit, error
from gradfuse.frontend.tensor_masks import advanced_index
from gradfuse.frontend.tensor_methods import _in_place

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor

WHAT = "x[...] = value"


def getitem(x: Tensor, key: object) -> Tensor:
    """`x[key]`: ints, slices, None and ... as NumPy's basic indexing; one `Step` (a
    `gradfuse.steps` counter) takes that iteration's slot; see `advanced_index`."""
    keys = key if isinstance(key, tuple) else (key,)
    if any(not isinstance(k, int | slice | Step) and k is not None and k is not ...
           for k in keys):  # fmt: skip
        return advanced_index(x, keys)
    at = [d for d, k in enumerate(keys) if isinstance(k, Step)]
    if not at:
        return x._new(B.getitem(x.value, key))
    if len(at) > 1:
        raise error("x[...]: index with one loop step at most")
    step = keys[at[0]]
    assert isinstance(step, Step)
    return x._new(B.getitem_step(x.value, keys, at[0], step.counter, step.count))


def setitem(x: Tensor, key: object, value: object) -> None:
    """`x[key] = value`: `x` stands for its new value from here on."""
    keys = key if isinstance(key, tuple) else (key,)
    first = keys[0] if len(keys) == 1 else None
    if hasattr(first, "value") and hasattr(first, "shape") and element_type(first.value) == i1:  # type: ignore[union-attr]
        new = _masked(x, first, value)  # type: ignore[arg-type]
    elif all(isinstance(k, int | slice) or k is None or k is ... for k in keys):
        new = _sliced(x, keys, value)
    else:
        raise error(
            f"{WHAT}: the key may be ints, slices, None and ..., or a mask; for a tensor of"
            " indices use x.scatter_add, or gradfuse.where(mask, value, x)"
        )
    _in_place(x, new, WHAT)


def _masked(x: Tensor, mask: Tensor, value: object) -> Tensor:
    """`where(mask, value, x)`, a mask of `x`'s leading dims extended over the rest."""
    if tuple(x.shape[: mask.ndim]) != tuple(mask.shape):
        raise error(
            f"{WHAT}: a mask of shape {list(mask.shape)} does not cover the leading dims"
            f" of a tensor of shape {list(x.shape)}"
        )
    operand = x._operand(value)
    if isinstance(operand, SSAValue):
        if prod(shape_of(operand)) != 1:
            raise error(
                f"{WHAT}: under a mask the value is a number or a one-element tensor (how"
                " many elements the mask selects is known only when the program runs)"
            )
        operand = B.reshape(operand, [])
    full = mask.reshape([*mask.shape, *[1] * (x.ndim - mask.ndim)])
    return x._where(full, operand if isinstance(operand, float) else x._new(operand), x)


def _sliced(x: Tensor, keys: tuple[Any, ...], value: object) -> Tensor:
    """The elements of `x` NumPy's basic indexing selects with `keys`, replaced."""
    for k in keys:
        if isinstance(k, slice) and k.step is not None and k.step < 1:
            raise error(f"{WHAT}: a slice's step must be positive (as PyTorch's), got {k.step}")
    n = prod(x.shape)
    if n >= 2**24:
        raise error(f"{WHAT}: positions are f32 (exact below 2^24), the tensor has {n}")
    try:
        positions = np.arange(n).reshape(x.shape)[keys]
    except IndexError as e:
        raise error(f"{WHAT}: {e} (a tensor of shape {list(x.shape)})") from None
    positions = np.asarray(positions)
    covered = np.zeros(n, bool)
    covered[positions.reshape(-1)] = True
    mask = x._new(B.dense(covered.reshape(x.shape).astype(np.float32), Float32Type())) > 0.5
    operand = x._operand(value)
    if not isinstance(operand, SSAValue):
        return x._where(mask, operand, x)
    src = x._new(operand)
    if tuple(src.shape) != positions.shape:
        while src.ndim > positions.ndim and src.shape[0] == 1:  # leading 1s broadcast away
            src = src.reshape(list(src.shape[1:]))
        try:
            fits = np.broadcast_shapes(src.shape, positions.shape) == positions.shape
        except ValueError:
            fits = False
        if not fits:
            raise error(
                f"{WHAT}: a value of shape {list(value.shape)} cannot be broadcast to the"  # type: ignore[attr-defined]
                f" {list(positions.shape)} elements selected"
            )
        src = src.broadcast_to(list(positions.shape))
    if src.dtype != x.dtype:
        src = src.to(x.dtype)
    index = x._new(B.dense(positions.reshape(-1).astype(np.float32), Float32Type()))
    flat = emit(tg.ScatterAddOp(index.value, src.reshape(-1).value, 0, [n])).result
    return x._where(mask, x._new(flat).reshape(list(x.shape)), x)
