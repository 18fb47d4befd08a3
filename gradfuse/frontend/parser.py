"""Parses `.tg` text (docs/tg-syntax.md) into xDSL IR with Lark.

Every op gets its `.tg` position as location (or the explicit `loc(...)` it
carries), and is verified as soon as it is built, so each mistake is reported
once, where it is:

    >>> parse_tg('func @f() { %x = tg.feeder "x" : tensor<2xf32> }', "f.tg")
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import io
import sys
from collections.abc import Sequence
from functools import cache
from importlib.resources import files

import lark
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from xdsl.dialects import func
from xdsl.dialects.builtin import FileLineColLoc, IndexType, IntAttr, ModuleOp, NameLoc, StringAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import IRDLOperation, OptPropertyDef, VarOperandDef, VarResultDef
from xdsl.utils.exceptions import VerifyException

from gradfuse.backend.disk_cache import cache_dir, store, verified
from gradfuse.diagnostics import EscapeError, GradfuseError, Position, unquote
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import parse_type, tensor_type_problem
from gradfuse.frontend.parse_attributes import ATTR_KINDS, AttributeReader
from gradfuse.gcpause import paused_gc

MAX_DEPTH = 64
"""How deep `tg.for` loops and dense literals may nest (deeper is an error, not a
crash of the recursive passes)."""

OPS: dict[str, type[IRDLOperation]] = {op.name: op for op in tg.TG.operations}  # type: ignore[misc]
SPECIAL_OPS = ("tg.for", "tg.grad", "tg.yield")


LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


@cache
def _lark() -> Lark:
    """The `.tg` parser. Building its LALR tables takes Lark 0.4 s, more than the rest
    of a small `ir-opt` run, so they are kept in the disk cache (`cache_dir("lark")`),
    keyed by the grammar, the options and the versions of Lark and Python, and loaded
    from there by every later process (ir-opt on a small file: 1.0 -> 0.6 s)."""
    grammar = files("gradfuse.frontend").joinpath("grammar.lark").read_text()
    key = "\0".join([grammar, repr(LARK_OPTIONS), lark.__version__, sys.version])
    try:
        entry = cache_dir("lark") / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.pickle"
    except GradfuseError:  # no cache folder can be made: parse without one
        return Lark(grammar, **LARK_OPTIONS)
    if verified(entry):  # sealed by the process that built it: whole, and ours
        return Lark.load(io.BytesIO(entry.read_bytes()))
    parser = Lark(grammar, **LARK_OPTIONS)
    tables = io.BytesIO()
    parser.save(tables)
    with contextlib.suppress(OSError):  # a full disk costs the next process 0.4 s
        store(entry, tables.getvalue())
    return parser


def parse_tg(text: str, filename: str = "<string>", line_offset: int = 0) -> ModuleOp:
    """Parses .tg text into a verified `builtin.module` of `func.func`s.

    `line_offset` shifts reported lines (for a chunk of a `--split-input-file` input).
    """
    with paused_gc():
        return _parse(text, filename, line_offset)


def _parse(text: str, filename: str, line_offset: int) -> ModuleOp:
    lines = text.splitlines()
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as err:
        line, col = max(err.line, 1), max(err.column, 1)
        if isinstance(err, UnexpectedEOF) or line > len(lines):
            line = max(len(lines), 1)
            col = len(lines[-1]) + 1 if lines else 1
        src = lines[line - 1] if 0 < line <= len(lines) else None
        raise GradfuseError(
            _syntax_message(err), Position(filename, line + line_offset, col, src)
        ) from None
    return _Builder(filename, lines, line_offset).module(tree)


def _syntax_message(err: UnexpectedInput) -> str:
    if isinstance(err, UnexpectedToken):
        if err.token.type == "$END":
            return "unexpected end of input"
        expected = sorted(_describe(t) for t in err.expected)
        shown = ", ".join(expected[:6]) + (", ..." if len(expected) > 6 else "")
        return f"unexpected '{err.token}', expected {shown}"
    if isinstance(err, UnexpectedCharacters):
        return f"unexpected character '{err.char}'"
    return "unexpected end of input"


def _describe(terminal: str) -> str:
    names = {
        "VALUE": "a value (%name)", "TENSOR_TYPE": "a type", "NUMBER": "a number",
        "STRING": "a string", "OPNAME": "an op", "SYMBOL": "@name", "NAME": "an attribute",
        "RBRACE": "'}'", "LBRACE": "'{'", "COLON": "':'", "COMMA": "','", "EQUAL": "'='",
        "RPAR": "')'", "LPAR": "'('", "FUNC": "'func'",
    }  # fmt: skip
    return names.get(terminal, terminal.lower())


class _Builder(AttributeReader):
    """Turns the Lark tree into ops, tracking SSA names and positions."""

    def __init__(self, filename: str, lines: list[str], line_offset: int):
        self.filename, self.lines, self.offset = filename, lines, line_offset
        self.scopes: list[dict[str, SSAValue]] = []
        self.defined: set[str] = set()
        self.max_depth = MAX_DEPTH
        self.assigns: list[tuple[Operation, Tree]] = []

    # --- positions and errors -----------------------------------------------------

    def pos(self, node: Tree | Token) -> Position:
        line = node.line if isinstance(node, Token) else node.meta.line
        col = node.column if isinstance(node, Token) else node.meta.column
        return self.at(line or 1, col or 1)

    def at(self, line: int, col: int) -> Position:
        """The position of line `line` (of this chunk), column `col`, with its source."""
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return Position(self.filename, line + self.offset, col, src)

    def error(self, node: Tree | Token, message: str) -> GradfuseError:
        return GradfuseError(message, self.pos(node))

    def location(self, node: Tree, loc: Tree | None) -> Attribute:
        if loc is None:
            p = self.pos(node)
            return FileLineColLoc(StringAttr(self.filename), IntAttr(p.line), IntAttr(p.column))
        inner = loc.children[1]
        if inner.data == "name_loc":
            name, file_loc = inner.children
            return NameLoc(StringAttr(self.unquote(name)), self._file_loc(file_loc))
        return self._file_loc(inner)

    def _file_loc(self, node: Tree) -> FileLineColLoc:
        file, line, col = node.children
        return FileLineColLoc(
            StringAttr(self.unquote(file)), IntAttr(self.integer(line)), IntAttr(self.integer(col))
        )

    def unquote(self, tok: Token) -> str:
        """The text of a STRING token, escapes decoded; a bad escape is located."""
        try:
            return unquote(str(tok)[1:-1])
        except EscapeError as err:
            at = self.at(tok.line or 1, (tok.column or 1) + 1 + err.offset)
            raise GradfuseError(str(err), at) from None

    # --- SSA names ----------------------------------------------------------------

    def lookup(self, tok: Token) -> SSAValue:
        name = str(tok)[1:]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.defined:
            raise self.error(
                tok, f"value %{name} is defined inside a loop body and not visible here"
            )
        raise self.error(tok, f"use of undefined value %{name}")

    def define(self, tok: Token, value: SSAValue) -> None:
        name = str(tok)[1:]
        if name in self.defined:
            raise self.error(tok, f"redefinition of value %{name}")
        self.defined.add(name)
        self.scopes[-1][name] = value
        if SSAValue.is_valid_name(name):
            value.name_hint = name

    def define_all(self, toks: Sequence[Token], values: Sequence[SSAValue], node: Tree, what: str):
        if len(toks) != len(values):
            raise self.error(
                node, f"{what} has {len(values)} result(s), but {len(toks)} name(s) are given"
            )
        for tok, value in zip(toks, values):
            self.define(tok, value)

    # --- structure -----------------------------------------------------------------

    def module(self, tree: Tree) -> ModuleOp:
        funcs: list[Operation] = []
        names: set[str] = set()
        for node in tree.children:
            f = self.func(node)
            if f.sym_name.data in names:
                raise self.error(node, f"redefinition of function @{f.sym_name.data}")
            names.add(f.sym_name.data)
            funcs.append(f)
        module = ModuleOp(funcs)
        for op, stmt in self.assigns:
            self.verify(op, stmt)
        return module

    def func(self, node: Tree) -> func.FuncOp:
        symbol, *rest = node.children
        body_node = rest[-1]
        args = [c for c in rest[:-1] if isinstance(c, Tree) and c.data == "arg"]
        arg_types = [self.type(a.children[1]) for a in args]
        result_types = [self.type(c) for c in rest[:-1] if isinstance(c, Tree) and c.data == "type"]
        self.scopes, self.defined = [{}], set()
        block = Block(arg_types=arg_types)
        for a, barg in zip(args, block.args):
            self.define(a.children[0], barg)
        name = str(symbol)[1:]
        self.body(body_node, block, in_func=True)
        last = block.last_op
        if not isinstance(last, func.ReturnOp):
            if result_types:
                raise self.error(body_node, f"function @{name} must end with return")
            block.add_op(func.ReturnOp())
            last = block.last_op
        assert isinstance(last, func.ReturnOp)
        got = [v.type for v in last.arguments]
        if got != result_types:
            raise self.error(
                node,
                f"function @{name} returns {_types(got)}, but its signature says {_types(result_types)}",
            )
        f = func.FuncOp(name, (arg_types, result_types), Region(block))
        f.location = self.location(node, None)
        return f

    def body(self, node: Tree, block: Block, in_func: bool) -> None:
        built: list[tuple[Operation, Tree]] = []
        for stmt in node.children:
            if block.last_op is not None and block.last_op.name in ("func.return", "tg.yield"):
                raise self.error(stmt, "no op may follow the block's terminator")
            built.append((getattr(self, stmt.data)(stmt, block, in_func), stmt))
        for op, stmt in built:
            if isinstance(op, tg.AssignOp):  # its param may come later: checked at the end
                self.assigns.append((op, stmt))
            elif not isinstance(op, tg.ForOp | func.ReturnOp):  # checked where built
                self.verify(op, stmt)

    def verify(self, op: Operation, node: Tree) -> None:
        try:
            op.verify()
        except VerifyException as err:  # xDSL's constraint messages span lines: one line
            raise self.error(node, " ".join(str(err).split())) from None

    def type(self, node: Tree) -> Attribute:
        tok = node.children[0]
        if tok.type == "INDEX":
            return IndexType()
        ty = parse_type(str(tok))
        problem = tensor_type_problem(ty)
        if problem is not None:
            raise self.error(tok, problem)
        return ty

    def types(self, node: Tree | None) -> list[Attribute]:
        return [] if node is None else [self.type(t) for t in node.children]

    def names(self, node: Tree | None) -> list[Token]:
        return [] if node is None else list(node.children[0].children)

    def values(self, node: Tree | None) -> list[SSAValue]:
        return [] if node is None else [self.lookup(t) for t in node.children]

    # --- statements ----------------------------------------------------------------

    def return_op(self, node: Tree, block: Block, in_func: bool) -> Operation:
        _, values, loc = node.children
        if not in_func:
            raise self.error(
                node,
                "return is only allowed at the end of a function body; loops end with tg.yield",
            )
        return self.finish(func.ReturnOp(*self.values(values)), node, block, None, loc)

    def for_op(self, node: Tree, block: Block, in_func: bool) -> Operation:
        results, _, ivar, lo, hi, step, iter_node, types, body, loc = node.children
        if len(self.scopes) > MAX_DEPTH:
            raise self.error(node, f"tg.for loops are nested too deep: at most {MAX_DEPTH} levels")
        carried = [] if iter_node is None else [c.children for c in iter_node.children]
        inits = [self.lookup(init) for _, init in carried]
        written = self.types(types)
        if written and written != [v.type for v in inits]:
            raise self.error(
                node,
                f"tg.for: written types {_types(written)} differ from the carried values' {_types([v.type for v in inits])}",
            )
        if inits and not written:
            raise self.error(node, "tg.for: write the carried types after ':'")
        op = tg.ForOp(self.integer(lo), self.integer(hi), self.integer(step), inits)
        op.location = self.location(node, loc)
        inner = op.body.block
        self.scopes.append({})
        self.define(ivar, inner.args[0])
        for (name, _), arg in zip(carried, inner.args[1:]):
            self.define(name, arg)
        block.add_op(op)
        self.body(body, inner, in_func=False)
        self.scopes.pop()
        if not isinstance(inner.last_op, tg.YieldOp):
            raise self.error(body, "tg.for: the body must end with tg.yield")
        try:
            op.verify_()
        except VerifyException as err:  # xDSL's constraint messages span lines: one line
            raise self.error(node, " ".join(str(err).split())) from None
        self.define_all(self.names(results), op.results, node, "tg.for")
        return op

    def grad_op(self, node: Tree, block: Block, in_func: bool) -> Operation:
        results, _, out, wrt, types, loc = node.children
        op = tg.GradOp(self.lookup(out), self.values(wrt))
        written = self.types(types)
        if written and written != list(op.result_types):
            raise self.error(
                node,
                f"tg.grad: gradient types are {_types(op.result_types)}, not {_types(written)}",
            )
        return self.finish(op, node, block, results, loc)

    def finish(
        self, op: Operation, node: Tree, block: Block, results: Tree | None, loc: Tree | None
    ):
        op.location = self.location(node, loc)
        block.add_op(op)
        self.define_all(self.names(results), op.results, node, op.name)
        return op

    def op(self, node: Tree, block: Block, in_func: bool) -> Operation:
        results, opname, key, operand_vals, literal, *rest = node.children
        attrs, types, loc = rest[:-2], rest[-2], rest[-1]
        name = str(opname)
        cls = OPS.get(name)
        if cls is None or name in SPECIAL_OPS[:2]:
            hint = difflib.get_close_matches(name, OPS, n=1)
            extra = f"; did you mean {hint[0]}?" if hint else ""
            raise self.error(opname, f"unknown op '{name}'{extra}")
        op_def = cls.get_irdl_definition()
        props: dict[str, Attribute] = {}
        result_types = self.types(types)
        if key is not None:
            if "key" not in op_def.properties:
                raise self.error(key, f"{name} takes no name")
            props["key"] = StringAttr(self.unquote(key))
        elif "key" in op_def.properties:
            raise self.error(opname, f'{name} needs a name: {name} "name" ...')
        if literal is not None:
            if cls is not tg.ConstantOp:
                raise self.error(literal, f"{name} takes no literal value")
            props["value"] = self.literal(literal, result_types, name)
        for attr in attrs:
            attr_name, attr_value = attr.children
            if str(attr_name) not in op_def.properties or str(attr_name) not in ATTR_KINDS:
                allowed = [p for p in op_def.properties if p in ATTR_KINDS]
                known = f" (it has: {', '.join(allowed)})" if allowed else ""
                raise self.error(attr_name, f"{name} has no attribute '{attr_name}'{known}")
            if str(attr_name) in props:
                raise self.error(attr_name, f"attribute '{attr_name}' given twice")
            props[str(attr_name)] = self.attribute(str(attr_name), attr_value, result_types, name)
        for prop, prop_def in op_def.properties.items():
            if prop not in props and not isinstance(prop_def, OptPropertyDef):
                form = "a value" if prop == "value" and cls is tg.ConstantOp else f"{prop}=..."
                raise self.error(opname, f"{name} needs {form}")
        operands = self.values(operand_vals)
        self.check_arity(cls, operands, result_types, node, name)
        op = cls.create(operands=operands, result_types=result_types, properties=props)
        return self.finish(op, node, block, results, loc)

    def check_arity(self, cls, operands, result_types, node: Tree, name: str) -> None:
        op_def = cls.get_irdl_definition()
        fixed = [d for _, d in op_def.operands if not isinstance(d, VarOperandDef)]
        variadic = len(fixed) != len(op_def.operands)
        if len(operands) < len(fixed) or (not variadic and len(operands) != len(fixed)):
            want = f"at least {len(fixed)}" if variadic else str(len(fixed))
            raise self.error(node, f"{name} expects {want} operand(s), got {len(operands)}")
        fixed_results = [d for _, d in op_def.results if not isinstance(d, VarResultDef)]
        if len(fixed_results) == len(op_def.results) and len(result_types) != len(fixed_results):
            if not result_types:
                raise self.error(node, f"{name}: missing result type after ':'")
            raise self.error(
                node, f"{name} has {len(fixed_results)} result(s), got {len(result_types)} type(s)"
            )


def _types(types: Sequence[Attribute]) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"
