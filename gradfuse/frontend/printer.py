"""Prints tg IR as `.tg` text (docs/tg-syntax.md); `parse_tg` reads it back.

Print -> parse -> print is byte-identical. Names come from the values' name
hints (`%w`), made unique with `_1`, `_2` suffixes as xDSL does; unnamed values
are numbered.

    func @main() {
      %x = tg.feeder "x" : tensor<2xf32>
      return
    }
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    AffineMapAttr,
    AffineSetAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FileLineColLoc,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
    TensorType,
    i1,
)
from xdsl.ir import Attribute, Operation, SSAValue

from gradfuse.diagnostics import GradfuseError, position_of, quote, unique_name
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ELEMENT_TYPES, ints
from gradfuse.frontend.parse_attributes import ATTR_KINDS

_ELEMENT_NAMES = {v: k for k, v in ELEMENT_TYPES.items()}


def print_tg(module: Operation, print_locations: bool = False) -> str:
    """The .tg text of a module (or of one function)."""
    printer = _Printer(print_locations)
    funcs = [module] if isinstance(module, func.FuncOp) else list(module.walk())
    for f in funcs:
        if isinstance(f, func.FuncOp):
            printer.func(f)
        elif not isinstance(f, ModuleOp) and isinstance(f.parent_op(), ModuleOp):
            raise _unprintable(f)
    return "".join(printer.out)


def type_str(ty: Attribute) -> str:
    """`tensor<2x4xf32>` for a tensor type; `index` for the loop variable."""
    if isinstance(ty, TensorType) and ty.element_type in _ELEMENT_NAMES:
        dims = "".join(f"{d}x" for d in ty.get_shape())
        return f"tensor<{dims}{_ELEMENT_NAMES[ty.element_type]}>"
    return str(ty)


def float_str(value: float, element: Attribute | None = None) -> str:
    """Shortest text that reads back to the same value (in f32 for f32 data)."""
    if element is not None and _ELEMENT_NAMES.get(element) in ("f32", "f16", "bf16"):
        text = str(np.float32(value))
    else:
        text = repr(float(value))
    return text if any(c in text for c in ".en") else text + ".0"


def _unprintable(op: Operation) -> GradfuseError:
    return GradfuseError(
        f"'{op.name}' has no .tg form; print it as MLIR with -t mlir", position_of(op.location)
    )


class _Printer:
    def __init__(self, print_locations: bool):
        self.print_locations = print_locations
        self.out: list[str] = []
        self.names: dict[SSAValue, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def name(self, value: SSAValue) -> str:
        if value not in self.names:
            hint = value.name_hint
            if hint is None:
                while str(self.counter) in self.used:
                    self.counter += 1
                chosen = str(self.counter)
            else:
                chosen = unique_name(hint, self.used)
            self.used.add(chosen)
            self.names[value] = chosen
        return "%" + self.names[value]

    def names_of(self, values: Iterable[SSAValue]) -> str:
        return ", ".join(self.name(v) for v in values)

    def loc(self, op: Operation) -> str:
        if not self.print_locations:
            return ""
        loc = op.location
        if isinstance(loc, NameLoc) and isinstance(loc.location, FileLineColLoc):
            return f" loc({quote(loc.desc.data)}({_file_loc(loc.location)}))"
        if isinstance(loc, FileLineColLoc):
            return f" loc({_file_loc(loc)})"
        return ""

    def func(self, f: func.FuncOp) -> None:
        if not f.body.blocks:  # a declaration (a lowered program's host callback)
            raise _unprintable(f)
        if self.out:
            self.out.append("\n")
        self.names, self.used, self.counter = {}, set(), 0
        block = f.body.block
        args = ", ".join(f"{self.name(a)}: {type_str(a.type)}" for a in block.args)
        outs = f.function_type.outputs.data
        sig = f" -> ({', '.join(type_str(t) for t in outs)})" if outs else ""
        self.out.append(f"func @{f.sym_name.data}({args}){sig} {{\n")
        for op in block.ops:
            self.op(op, 1)
        self.out.append("}\n")

    def op(self, op: Operation, depth: int) -> None:
        pad = "  " * depth
        if isinstance(op, func.ReturnOp):
            vals = f" {self.names_of(op.arguments)}" if op.arguments else ""
            self.out.append(f"{pad}return{vals}{self.loc(op)}\n")
            return
        if not op.name.startswith("tg.") or isinstance(op, tg.FusionOp):
            raise _unprintable(op)  # tg-fuse's decisions print as MLIR
        results = f"{self.names_of(op.results)} = " if op.results else ""
        if isinstance(op, tg.ForOp):
            self.for_op(op, pad, results, depth)
            return
        if isinstance(op, tg.GradOp):
            body = f" {self.name(op.output)} wrt {self.names_of(op.wrt)}"
        else:
            body = self.generic_body(op)
        types = f" : {', '.join(type_str(r.type) for r in op.results)}" if op.results else ""
        self.out.append(f"{pad}{results}{op.name}{body}{types}{self.loc(op)}\n")

    def generic_body(self, op: Operation) -> str:
        parts: list[str] = []
        key = op.properties.get("key")
        operands = self.names_of(op.operands)
        if isinstance(key, StringAttr):
            parts.append(quote(key.data) + ("," if operands else ""))
        if operands:
            parts.append(operands)
        if isinstance(op, tg.ConstantOp):
            parts.append(self.literal(op.value, op.result.type))
        for prop, attr in op.properties.items():
            if prop in ATTR_KINDS and not (isinstance(op, tg.ConstantOp) and prop == "value"):
                parts.append(f"{prop}={self.attr_value(attr, op)}")
        return "".join(" " + p for p in parts)

    def for_op(self, op: tg.ForOp, pad: str, results: str, depth: int) -> None:
        block = op.body.block
        header = (
            f"tg.for {self.name(block.args[0])} = {op.lower.value.data} to"
            f" {op.upper.value.data} step {op.step.value.data}"
        )
        if op.inits:
            pairs = ", ".join(
                f"{self.name(a)} = {self.name(v)}" for a, v in zip(block.args[1:], op.inits)
            )
            types = ", ".join(type_str(v.type) for v in op.inits)
            header += f" iter({pairs}) : {types}"
        self.out.append(f"{pad}{results}{header} {{\n")
        for inner in block.ops:
            self.op(inner, depth + 1)
        self.out.append(f"{pad}}}{self.loc(op)}\n")

    def attr_value(self, attr: Attribute, op: Operation) -> str:
        if isinstance(attr, DenseArrayBase):
            return "[" + ", ".join(str(v) for v in ints(attr)) + "]"
        if isinstance(attr, IntegerAttr):
            return str(attr.value.data)
        if isinstance(attr, AffineMapAttr):
            return f"affine_map<{attr.data}>"
        if isinstance(attr, AffineSetAttr):
            return f"affine_set<{attr.data}>"
        if isinstance(attr, StringAttr):
            return quote(attr.data)
        result_type = op.results[0].type if op.results else None
        return self.literal(attr, result_type)

    def literal(self, attr: Attribute, result_type: Attribute | None) -> str:
        if isinstance(attr, FloatAttr):  # stored as f64: print every digit
            return float_str(attr.value.data)
        if isinstance(attr, DenseIntOrFPElementsAttr):
            values = np.array(attr.get_values()).reshape(attr.get_shape())
            return f"dense<{_nested(values, attr.get_element_type())}>"
        return str(attr)


def _nested(values: np.ndarray, element: Attribute) -> str:
    if values.ndim == 0:
        v = values.item()
        if isinstance(element, tg.FLOAT_TYPES):
            return float_str(v, element)
        return str(int(v) & 1) if element == i1 else str(int(v))  # i1 true is stored as -1
    return "[" + ", ".join(_nested(v, element) for v in values) + "]"


def _file_loc(loc: FileLineColLoc) -> str:
    return f"{quote(loc.filename.data)}:{loc.line.data}:{loc.column.data}"
