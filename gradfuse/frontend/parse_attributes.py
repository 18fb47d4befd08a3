"""How `.tg` attributes (`key=value`) are read: integer lists, integers, numbers,
affine maps and sets, dense literals. The printer writes them the same way.

    %t = tg.permute %x perm=[1, 0] : tensor<4x2xf32>      // ints
    %c = tg.constant dense<[[1.0, 2.0]]> : tensor<1x2xf32>  // a dense literal
"""

from __future__ import annotations

import math
import re

import numpy as np
from lark import Token, Tree
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute

from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import i64_array

ATTR_KINDS: dict[str, str] = {
    "dims": "ints", "perm": "ints", "starts": "ints", "limits": "ints", "strides": "ints",
    "low": "ints", "high": "ints", "dim": "int", "value": "float", "init": "number_or_dense",
    "map": "affine_map", "seed": "int", "guard": "affine_set",
    "stride": "ints", "padding": "ints", "dilation": "ints", "output_padding": "ints",
    "groups": "int", "kernel": "ints", "reduce": "string",
}  # fmt: skip
"""How each `key=value` attribute of the .tg syntax is read and printed."""


def _number(tok: Token) -> float:
    return float(str(tok))


def _rounded(values: list[float], dtype: type) -> list[float]:
    with np.errstate(over="ignore"):
        return [float(v) for v in np.asarray(values, dtype=np.float64).astype(dtype)]


def _first_token(node: Tree | Token) -> Tree | Token:
    return node


class AttributeReader:
    """The attribute half of the `.tg` parser (`parser._Builder` mixes it in)."""

    max_depth: int = 64
    """How deep a dense literal may nest (its rank)."""

    def error(self, node: Tree | Token, message: str) -> GradfuseError:
        raise NotImplementedError

    def unquote(self, tok: Token) -> str:
        raise NotImplementedError

    def integer(self, tok: Token) -> int:
        text = str(tok)
        if re.fullmatch(r"-?[0-9]+", text):
            value = int(text)
        else:
            number = _number(tok)
            if not math.isfinite(number) or number != int(number):
                raise self.error(tok, f"expected an integer, got {text}")
            value = int(number)
        if not -(2**63) <= value < 2**63:
            raise self.error(tok, f"integer {text} is out of range: integers must fit in 64 bits")
        return value

    def attribute(
        self, name: str, node: Tree | Token, result_types: list[Attribute], op: str
    ) -> Attribute:
        kind = ATTR_KINDS[name]
        tree_kind = node.data if isinstance(node, Tree) else "string"
        if kind == "ints":
            if tree_kind != "int_list":
                raise self.error(
                    _first_token(node), f"{op}: {name} must be a list of integers like [0, 1]"
                )
            return i64_array([self.integer(t) for t in node.children if t is not None])
        if kind == "int":
            if tree_kind != "number":
                raise self.error(_first_token(node), f"{op}: {name} must be an integer")
            return IntegerAttr(self.integer(node.children[0]), i64)
        if kind in ("affine_map", "affine_set"):
            if tree_kind != kind:
                raise self.error(node, f"{op}: {name} must be an {kind}<(d0, ...) ...>")
            return self.affine_map(node.children[0])
        if kind == "string":
            if tree_kind != "string":
                raise self.error(_first_token(node), f'{op}: {name} must be a string like "sum"')
            return StringAttr(self.unquote(node))  # type: ignore[arg-type]
        if kind == "float":
            if tree_kind != "number":
                raise self.error(_first_token(node), f"{op}: {name} must be a number")
            return FloatAttr(_number(node.children[0]), f64)
        return self.literal(node, result_types, op)

    def affine_map(self, tok: Token) -> Attribute:
        from xdsl.context import Context
        from xdsl.parser import Parser

        try:
            return Parser(Context(), str(tok)).parse_attribute()
        except Exception as err:  # xDSL's own message, at our position
            raise self.error(tok, f"bad affine map: {str(err).splitlines()[-1].strip()}") from None

    def literal(self, node: Tree | Token, result_types: list[Attribute], op: str) -> Attribute:
        if isinstance(node, Tree) and node.data == "number":
            return FloatAttr(_number(node.children[0]), f64)
        if not isinstance(node, Tree) or node.data != "dense":
            raise self.error(_first_token(node), f"{op}: expected a number or dense<...>")
        ty = result_types[0] if result_types else None
        if not isinstance(ty, TensorType):
            raise self.error(node, f"{op}: a dense value needs a tensor result type after ':'")
        flat, shape = self.nested(node.children[1])
        elt = ty.element_type
        if isinstance(elt, tg.FLOAT_TYPES):  # rounded to the element type (1e40: inf in f32)
            narrow = np.float16 if isinstance(elt, Float16Type) else np.float32
            data = flat if isinstance(elt, Float64Type) else _rounded(flat, narrow)
        else:
            data = self.integers(node, flat, elt)
        return DenseIntOrFPElementsAttr.from_list(TensorType(elt, shape), data)  # type: ignore[arg-type]

    def integers(self, node: Tree, values: list[float], elt: Attribute) -> list[int]:
        """The values of a dense literal of integers, each integral and in range."""
        width = elt.width.data if isinstance(elt, IntegerType) else 64
        lo, hi = (0, 1) if width == 1 else (-(2 ** (width - 1)), 2 ** (width - 1) - 1)
        for v in values:
            if not (math.isfinite(v) and v == int(v) and lo <= v <= hi):
                raise self.error(node, f"dense value {v} is not an {elt} (from {lo} to {hi})")
        return [int(v) for v in values]

    def nested(self, node: Tree, depth: int = 0) -> tuple[list[float], list[int]]:
        if node.data == "number":
            return [_number(node.children[0])], []
        if depth >= self.max_depth:
            raise self.error(
                node, f"dense literal is nested too deep: at most {self.max_depth} levels"
            )
        parts = [self.nested(c, depth + 1) for c in node.children if c is not None]
        if not parts:
            raise self.error(node, "empty dense literal")
        shapes = {tuple(s) for _, s in parts}
        if len(shapes) != 1:
            raise self.error(node, "ragged dense literal: all rows must have the same shape")
        return [v for flat, _ in parts for v in flat], [len(parts), *parts[0][1]]
