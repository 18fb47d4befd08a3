"""How `.tg` attributes (`key=value`) are read: integer lists, integers, numbers,
affine maps and sets, dense literals. The printer writes them the same way.

    %t = tg.permute %x perm=[1, 0] : tensor<4x2xf32>      // ints
    %c = tg.constant dense<[[1.0, 2.0]]> : tensor<1x2xf32>  // a dense literal
"""

from __future__ import annotations

from lark import Token, Tree
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
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
    "groups": "int", "kernel": "ints",
}  # fmt: skip
"""How each `key=value` attribute of the .tg syntax is read and printed."""


def _number(tok: Token) -> float:
    return float(str(tok))


def _first_token(node: Tree | Token) -> Tree | Token:
    return node


class AttributeReader:
    """The attribute half of the `.tg` parser (`parser._Builder` mixes it in)."""

    def error(self, node: Tree | Token, message: str) -> GradfuseError:
        raise NotImplementedError

    def integer(self, tok: Token) -> int:
        raise NotImplementedError

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
        data = [int(v) for v in flat] if not isinstance(elt, tg.FLOAT_TYPES) else flat
        return DenseIntOrFPElementsAttr.from_list(TensorType(elt, shape), data)  # type: ignore[arg-type]

    def nested(self, node: Tree) -> tuple[list[float], list[int]]:
        if node.data == "number":
            return [_number(node.children[0])], []
        parts = [self.nested(c) for c in node.children if c is not None]
        if not parts:
            raise self.error(node, "empty dense literal")
        shapes = {tuple(s) for _, s in parts}
        if len(shapes) != 1:
            raise self.error(node, "ragged dense literal: all rows must have the same shape")
        return [v for flat, _ in parts for v in flat], [len(parts), *parts[0][1]]
