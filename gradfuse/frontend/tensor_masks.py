"""PyTorch's comparisons and masks on `Tensor`: the comparison operators and their
named forms, booleans promoted to floats where PyTorch promotes them, `~ & |` of masks,
`masked_fill`, and the one tensor index gradfuse takes (`x[range(n), target]`):

    (pred == target).sum()      # tg.cmplt twice, tg.cast, tg.reduce_sum: a count
    ~mask, a & b, a | b         # masks from masks
    x[range(n), target]         # row i's entry target[i] (tg.gather)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, i1
from xdsl.ir import SSAValue

from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects.tg_builder import element_type
from gradfuse.frontend.eager import host_value
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Scalar, Tensor

F32 = Float32Type()


def numeric(x: SSAValue) -> SSAValue:
    """`x`, a mask cast to 0.0/1.0 (f32) first: PyTorch counts and adds booleans."""
    return B.cast(x, F32) if element_type(x) == i1 else x


def promoted(
    x: SSAValue, y: SSAValue | float, arithmetic: bool = False
) -> tuple[SSAValue, SSAValue | float]:
    """Two operands with a mask among them cast to the other's float type (else f32),
    as PyTorch promotes booleans: `mask * x`, `mask == 0`, `mask + 1.0`. Arithmetic on two
    masks is an error: PyTorch's is logical (`m + m` is True, not 2)."""
    if arithmetic and isinstance(y, SSAValue) and element_type(x) == element_type(y) == i1:
        raise error(
            "arithmetic on two boolean masks: PyTorch's is logical (mask + mask is True);"
            " cast them with .float() for numbers, or combine them with gradfuse.where"
        )
    if isinstance(y, SSAValue) and element_type(y) == i1 and element_type(x) != i1:
        return x, B.cast(y, element_type(x))
    if element_type(x) == i1:
        x = B.cast(x, element_type(y) if isinstance(y, SSAValue) and element_type(y) != i1 else F32)
        return x, numeric(y) if isinstance(y, SSAValue) else y
    return x, y


def lt_(self: Tensor, other: object) -> Tensor:
    """The mask `self < other` (`tg.cmplt`)."""
    return self._new(B.cmplt(*promoted(self.value, self._operand(other))))


def gt_(self: Tensor, other: object) -> Tensor:
    """The mask `self > other`."""
    x, y = promoted(self.value, self._operand(other))
    return self._new(B.cmplt(y, x))


def le_(self: Tensor, other: object) -> Tensor:
    """The mask `self <= other` (false where either is NaN)."""
    return self._new(B.compare_le(*promoted(self.value, self._operand(other)), F32))


def ge_(self: Tensor, other: object) -> Tensor:
    """The mask `self >= other` (false where either is NaN)."""
    x, y = promoted(self.value, self._operand(other))
    return self._new(B.compare_le(y, x, F32))


def eq_(self: Tensor, other: object) -> Tensor:
    """The mask `self == other`: not `self != other` (false where either is NaN)."""
    ne_mask = B.compare_ne(*promoted(self.value, self._operand(other)), F32)
    return self._new(B.logical_not(ne_mask, F32))


def ne_(self: Tensor, other: object) -> Tensor:
    """The mask `self != other` (true where either is NaN)."""
    return self._new(B.compare_ne(*promoted(self.value, self._operand(other)), F32))


def isnan(self: Tensor) -> Tensor:
    """The mask of NaN elements: no comparison holds for them (`finite_count` 0)."""
    return self._new(B.cmplt(B.finite_count(numeric(self.value), F32), 0.5))


def isinf(self: Tensor) -> Tensor:
    """The mask of infinite elements (`finite_count` 1)."""
    count = self._new(B.finite_count(numeric(self.value), F32))
    return (count > 0.5) & (count < 1.5)


def isfinite(self: Tensor) -> Tensor:
    """The mask of finite elements (`finite_count` 2)."""
    return self._new(B.cmplt(1.5, B.finite_count(numeric(self.value), F32)))


def eq(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """The mask `self == other`."""
    return self == other


def ne(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """The mask `self != other`."""
    return self != other


def gt(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """The mask `self > other`."""
    return self > other


def ge(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """The mask `self >= other`."""
    return self >= other


def lt(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """The mask `self < other`."""
    return self < other


def le(self: Tensor, other: Tensor | Scalar) -> Tensor:
    """The mask `self <= other`."""
    return self <= other


def data_dependent(name: str) -> Any:
    """`x.masked_select(mask)`, `x.nonzero()`: results whose shape depends on the data,
    which a recorded program (static shapes) cannot hold; one error naming what to use."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        raise error(
            f"{name}(): its result's shape depends on the data, which a gradfuse program"
            " does not have while it is recorded; keep the shape: gradfuse.where(mask, x, 0.0)"
            " or x.masked_fill(~mask, 0.0), and (mask).sum() to count"
        )

    method.__name__ = name
    return method


masked_select, nonzero = data_dependent("masked_select"), data_dependent("nonzero")


def masked_fill(self: Tensor, mask: Tensor, value: Tensor | Scalar) -> Tensor:
    """`value` where the boolean `mask` holds, else `self` (`tg.where`, broadcast as
    PyTorch); no gradient reaches the filled positions. `value` is a number or a
    0-d tensor. `scores.masked_fill(pad > 0.5, float("-inf"))`
    """
    if not hasattr(mask, "_value") or mask.dtype != np.bool_:
        got = mask.dtype if hasattr(mask, "_value") else type(mask).__name__
        raise error(
            f"masked_fill: the mask must be a boolean Tensor (from a comparison), got {got}"
        )
    if hasattr(value, "_value") and value.ndim:
        raise error(
            f"masked_fill: value must be a number or a 0-d tensor, got shape {list(value.shape)}"
        )
    return self._new(B.where(mask.value, self._operand(value), self.value))


def _all_rows(key: Any, n: int) -> bool:
    """Whether `key` is `range(n)` or a tensor the host computes as 0, 1, ..., n - 1
    (`gradfuse.arange(n)`)."""
    if isinstance(key, range):
        return key == range(n)
    if hasattr(key, "_value") and key.shape == (n,):
        try:
            return bool(np.array_equal(host_value(key.value, "x[arange(n), ...]"), np.arange(n)))
        except GradfuseError:
            return False
    return False


def advanced_index(self: Tensor, keys: tuple[Any, ...]) -> Tensor:
    """`x[range(n), target]` or `x[arange(n), target]` (PyTorch's "nn really" tutorial's
    `-input[range(n), target]`):
    row i's entry `target[i]`, a gather; other tensor, list or mask indices are an error
    (their results' shapes depend on the data or call for a general gather)."""
    if len(keys) == 2 and self.ndim == 2 and _all_rows(keys[0], self.shape[0]):
        index = keys[1]
        if hasattr(index, "_value") and index.shape == (self.shape[0],):
            return self.gather(1, index.unsqueeze(1)).squeeze(1)
    raise error(
        "x[...]: only ints, slices, None and ... index a tensor (and x[range(n), target] of"
        " a [n, C] x): for a tensor of indices use x.gather(dim, index), for a mask"
        " gradfuse.where(mask, x, 0.0) or x.masked_fill(~mask, 0.0)"
    )


def _mask(x: object, what: str) -> SSAValue:
    if not hasattr(x, "_value") or element_type(x.value) != i1:  # type: ignore[attr-defined]
        raise error(f"{what}: expects boolean masks (from comparisons)")
    return x.value  # type: ignore[attr-defined]


def logical_not(self: Tensor) -> Tensor:
    """`~mask`: the mask negated."""
    return self._new(B.logical_not(_mask(self, "~mask"), F32))


def logical_and(self: Tensor, other: Tensor) -> Tensor:
    """`a & b` of two masks."""
    a, b = B.cast(_mask(self, "mask & mask"), F32), B.cast(_mask(other, "mask & mask"), F32)
    return self._new(B.cmplt(1.5, B.add(a, b)))


def logical_or(self: Tensor, other: Tensor) -> Tensor:
    """`a | b` of two masks."""
    a, b = B.cast(_mask(self, "mask | mask"), F32), B.cast(_mask(other, "mask | mask"), F32)
    return self._new(B.cmplt(0.5, B.add(a, b)))
