"""Helpers for the reference interpreter tests: build small tg modules in Python."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.parser import Parser

from gradfuse.dialects.tg import TG


class FuncBuilder:
    """Appends ops to a block: `v = fb(tg.AddOp(a, b))` returns the op's only result."""

    def __init__(self, *arg_types: Attribute, block: Block | None = None):
        self.block = block if block is not None else Block(arg_types=list(arg_types))
        self.args = self.block.args

    def __call__(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if len(op.results) == 1 else op  # type: ignore[return-value]

    def func(self, name: str, *results: SSAValue) -> func.FuncOp:
        self.block.add_op(func.ReturnOp(*results))
        types = ([a.type for a in self.args], [r.type for r in results])
        return func.FuncOp(name, types, Region(self.block))

    def module(self, *results: SSAValue) -> ModuleOp:
        """The module with this block as `@main` returning `results`, verified."""
        module = ModuleOp([self.func("main", *results)])
        module.verify()
        return module


def parse_mlir(text: str, name: str = "test.mlir") -> ModuleOp:
    """Parses (generic) MLIR text with the tg, func and builtin dialects."""
    ctx = Context()
    for dialect in (Builtin, Func, TG):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text, name).parse_module()
    module.verify()
    return module


@pytest.fixture
def fb() -> type[FuncBuilder]:
    """The `FuncBuilder` class."""
    return FuncBuilder


@pytest.fixture
def parse() -> Callable[..., ModuleOp]:
    """The `parse_mlir` function."""
    return parse_mlir
