"""Shared pieces of the tg dialect: shape helpers and the base op class."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from math import prod
from typing import ClassVar

from xdsl.dialects.builtin import (
    AffineMapAttr,
    AffineSetAttr,
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    TensorType,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.ir.affine import AffineMap, AffineSet
from xdsl.irdl import IRDLOperation, prop_def
from xdsl.pattern_rewriter import RewritePattern
from xdsl.traits import HasCanonicalizationPatternsTrait
from xdsl.utils.exceptions import VerifyException

FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)


# --- helpers shared by the verifiers -------------------------------------------


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    """The static shape of a tensor value or type."""
    ty = value.type if isinstance(value, SSAValue) else value
    if not isinstance(ty, TensorType):
        raise VerifyException(f"expected a tensor, got {ty}")
    return tuple(ty.get_shape())


def fmt_shape(shape: Sequence[int]) -> str:
    """`2x255` for (2, 255); `scalar` for ()."""
    return "x".join(str(d) for d in shape) if shape else "scalar"


def tensor(shape: Sequence[int], element: Attribute | None = None) -> TensorType:
    """Builds `tensor<shape x element>` (f32 by default)."""
    return TensorType(element or Float32Type(), list(shape))


def element_type(value: SSAValue) -> Attribute:
    """The element type of a tensor value (`f32` for `tensor<2x3xf32>`)."""
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.element_type


def tensor_like(value: SSAValue, shape: Sequence[int]) -> TensorType:
    """Builds a tensor of `shape` with the element type of tensor `value`."""
    return tensor(shape, element_type(value))


def access_properties(map: AffineMap, guard: AffineSet | None = None) -> dict[str, Attribute]:
    """The `map` and optional `guard` properties of an access (`tg.view`, `kernel.load`)."""
    props: dict[str, Attribute] = {"map": AffineMapAttr(map)}
    if guard is not None:
        props["guard"] = AffineSetAttr(guard)
    return props


def scalar_attr(value: int | float, ty: Attribute) -> Attribute:
    """A shared attribute of type `ty` (constants repeat): an `IntegerAttr` for an integer
    or index type (an i1 is 1 where `value` is nonzero: `scalar_attr(0.0, i1)` is false),
    else a `FloatAttr` of `float(value)`."""
    if isinstance(ty, IntegerType | IndexType):
        return _scalar_attr(int(value != 0) if ty == i1 else int(value), ty, None)
    value = float(value)  # 0.0 == -0.0, but they are different attributes
    return _scalar_attr(value, ty, math.copysign(1.0, value))


@lru_cache(maxsize=4096, typed=True)
def _scalar_attr(value: int | float, ty: Attribute, sign: float | None) -> Attribute:
    if isinstance(value, float):
        return FloatAttr(value, ty)  # type: ignore[arg-type]
    return IntegerAttr(value, ty)  # type: ignore[arg-type]


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """An `array<i64: ...>` property."""
    return DenseArrayBase.from_list(i64, list(values))


def ints(attr: DenseArrayBase) -> tuple[int, ...]:
    """The integers of an `array<i64: ...>` property."""
    return tuple(int(v) for v in attr.iter_values())


MAX_ELEMENTS = 2**60
"""The most elements a tensor may have: its byte size and every index fit in 64 bits."""


def tensor_type_problem(ty: Attribute) -> str | None:
    """Why a tensor type cannot be a tg value (a sentence), or None.

    tg tensors have static dims of size at least 1, at most `MAX_ELEMENTS` elements,
    and a floating-point element type or `i1` (masks)."""
    if not isinstance(ty, TensorType):
        return None
    shape = tuple(ty.get_shape())
    if any(d < 1 for d in shape):
        return f"every dimension of a tensor must be a fixed size of at least 1, got {ty}"
    if prod(shape) > MAX_ELEMENTS:
        return f"{ty} has {prod(shape)} elements, more than the {MAX_ELEMENTS} a tensor may have"
    if not isinstance(ty.element_type, FLOAT_TYPES) and ty.element_type != IntegerType(1):
        return (
            f"element type {ty.element_type} is not supported: tg tensors hold floats"
            " (f16, bf16, f32, f64) or i1 masks"
        )
    return None


def fail(op: Operation, message: str) -> VerifyException:
    """A verifier error that names the op: `tg.dot: inner dimensions differ: 2x3 @ 4x5`."""
    return VerifyException(f"{op.name}: {message}")


class TgOp(IRDLOperation):
    """Base of all tg ops: helpers that make verifier messages name the op.

    Before the op's own checks, `verify` checks every tensor type it uses
    (`tensor_type_problem`), for ops with `FLOAT_OPERANDS` that the operands hold
    floats (`%y = tg.add %m, %m : tensor<4xi1>` is an error), and that the operands and
    results named in `SAME_ELEMENT` hold one element type: `%y = tg.conv2d %x, %w ...`
    with an f64 input and an f32 weight is an error at the op, not one at the `tg.dot`
    that `tg-decompose` makes of it."""

    FLOAT_OPERANDS: ClassVar[bool] = False
    """Whether the op computes on its operands (floats only), not just moves them."""

    SAME_ELEMENT: ClassVar[tuple[str, ...]] = ()
    """The operands and results (by field name) that hold one element type, where the
    op's own checks do not say so: a convolution's input, weight and result."""

    def verify(self, verify_nested_ops: bool = True) -> None:
        for value in (*self.operands, *self.results):
            problem = tensor_type_problem(value.type)
            if problem is not None:
                raise self.fail(problem)
        if self.FLOAT_OPERANDS:
            for value in self.operands:
                ty = value.type
                if isinstance(ty, TensorType) and not isinstance(ty.element_type, FLOAT_TYPES):
                    raise self.fail(
                        f"operands must be tensors of floats (f16, bf16, f32, f64), got {ty}"
                    )
        named = [(name, getattr(self, name).type) for name in self.SAME_ELEMENT]
        if len({ty.element_type for _, ty in named if isinstance(ty, TensorType)}) > 1:
            listed = ", ".join(f"{name} {ty}" for name, ty in named)
            raise self.fail(f"element types differ: {listed}")
        super().verify(verify_nested_ops)

    def fail(self, message: str) -> VerifyException:
        return fail(self, message)

    def expect_shape(self, what: str, got: Sequence[int], want: Sequence[int]):
        if tuple(got) != tuple(want):
            raise self.fail(f"{what} should be {fmt_shape(want)}, got {fmt_shape(got)}")

    def expect_tensor(self, what: str, value: SSAValue) -> TensorType:
        if not isinstance(value.type, TensorType):
            raise self.fail(f"{what} must be a tensor, got {value.type}")
        return value.type

    def check_dim(self, rank: int) -> int:
        """The op's `dim` property, which must lie within `rank`."""
        dim = self.dim.value.data  # type: ignore[attr-defined]
        if not 0 <= dim < rank:
            raise self.fail(f"dim {dim} is outside rank {rank}")
        return dim

    def expect_splat(self, what: str, value: float, ty: Attribute) -> None:
        """A splat value of an `i1` tensor must be 0 or 1."""
        if isinstance(ty, TensorType) and ty.element_type == IntegerType(1) and value not in (0, 1):
            raise self.fail(f"{what} of an i1 tensor must be 0 or 1, got {value}")


class CountedLoop(IRDLOperation):
    """The bounds of a counted loop `lower <= i < upper` by `step`: `tg.for` and `kernel.for`."""

    lower = prop_def(IntegerAttr)
    upper = prop_def(IntegerAttr)
    step = prop_def(IntegerAttr)

    @staticmethod
    def bound_properties(lower: int, upper: int, step: int) -> dict[str, Attribute]:
        """The `lower`, `upper` and `step` properties of a loop."""
        return {
            "lower": IntegerAttr(lower, i64),
            "upper": IntegerAttr(upper, i64),
            "step": IntegerAttr(step, i64),
        }

    @property
    def bounds(self) -> tuple[int, int, int]:
        """(lower, upper, step)."""
        return self.lower.value.data, self.upper.value.data, self.step.value.data

    @property
    def trip_count(self) -> int:
        lo, hi, st = self.bounds
        return max(0, -(-(hi - lo) // st))

    def verify_step(self) -> None:
        if self.step.value.data < 1:
            raise fail(self, f"step must be positive, got {self.step.value.data}")


ELEMENT_TYPES: dict[str, Attribute] = {
    "f16": Float16Type(),
    "bf16": BFloat16Type(),
    "f32": Float32Type(),
    "f64": Float64Type(),
    "i1": IntegerType(1),
    "i8": IntegerType(8),
    "i32": IntegerType(32),
    "i64": IntegerType(64),
}


def parse_type(text: str) -> TensorType:
    """`tensor<2x4xf32>` -> TensorType (the .tg spelling of a type)."""
    *dims, elt = text[len("tensor<") : -1].split("x")
    return TensorType(ELEMENT_TYPES[elt], [int(d) for d in dims])


class TgCanonicalize(HasCanonicalizationPatternsTrait):
    """Folds splat constants and drops identities: the patterns of
    `gradfuse.dialects.tg_canonicalize`, which the dialect (`gradfuse.dialects.tg`) sets."""

    patterns: ClassVar[tuple[RewritePattern, ...]] = ()

    @classmethod
    def get_canonicalization_patterns(cls):  # type: ignore[override]
        assert cls.patterns, "gradfuse.dialects.tg sets the canonicalization patterns"
        return cls.patterns
