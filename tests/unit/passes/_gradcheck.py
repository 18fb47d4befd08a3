"""Test helpers: build small tg programs in Python and check their gradients.

module = build(lambda e, x, y: e.mul(x, y), [(2, 3), (2, 3)], grad=True)
check_gradients(lambda e, x: e.sin(x), [(4,)])  # tg-autodiff vs. finite differences
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.builder import Builder
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FileLineColLoc, FunctionType, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint

from gradfuse.backend.interpreters.tg import run
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.tg.autodiff import TgAutodiffPass
from gradfuse.passes.tg.decompose import TgDecomposePass

Body = Callable[..., SSAValue]
Shape = Sequence[int]


def model_loc(line: int, column: int = 1) -> FileLineColLoc:
    """`loc("model.py":line:column)`."""
    return FileLineColLoc(StringAttr("model.py"), IntAttr(line), IntAttr(column))


class LineEmitter(Emitter):
    """An emitter that gives each op its own `model.py:<n>:1` location (n = 1, 2, ...)."""

    def emit(self, op: Operation) -> SSAValue:
        self.location = model_loc(len(self.emitted) + 1)
        return super().emit(op)


def build(
    body: Body,
    shapes: Sequence[Shape],
    *,
    grad: bool = False,
    wrt: Sequence[int] | None = None,
    square: bool = True,
) -> ModuleOp:
    """`func @main(args) -> (out[, grads])` with `out = body(e, *args)`.

    With `square`, out is `body * (body + 1.5)`, so the cotangent reaching `body`
    is not all ones. With `grad`, a `tg.grad out wrt args[wrt]` follows.
    """
    block = Block(arg_types=[tensor(s) for s in shapes])
    e = LineEmitter(Builder(InsertPoint.at_end(block)), model_loc(0))
    out = body(e, *block.args)
    if square:
        out = e.mul(out, e.add(out, e.const(1.5, out)))
    results: list[SSAValue] = [out]
    if grad:
        wrt_values = [block.args[i] for i in (range(len(shapes)) if wrt is None else wrt)]
        op = tg.GradOp(out, wrt_values)
        op.location = model_loc(99, 5)
        e.builder.insert(op)
        results += op.results
    e.builder.insert(func.ReturnOp(*results))
    fn_type = FunctionType.from_lists([a.type for a in block.args], [r.type for r in results])
    fn = func.FuncOp("main", fn_type, Region(block))
    return ModuleOp([fn])


def loop(
    e: Emitter, n: int, inits: Sequence[SSAValue], body: Callable[..., Sequence[SSAValue]]
) -> list[SSAValue]:
    """`tg.for 0 to n iter(inits)` whose body yields `body(e_inner, *carried)`; its results."""
    op = tg.ForOp(0, n, 1, inits)
    e.emit(op)
    block = op.body.block
    inner = type(e)(Builder(InsertPoint.at_end(block)), e.location, e.emitted)
    block.add_op(tg.YieldOp(body(inner, *block.args[1:])))
    return list(op.results)


def matrix_rnn(e: Emitter, x: SSAValue, w: SSAValue) -> SSAValue:
    """h <- sigmoid(h @ w) over 5 steps (x: N x H, w: H x H), summed over the steps."""

    def body(b: Emitter, h: SSAValue, acc: SSAValue) -> list[SSAValue]:
        h2 = b.emit(tg.SigmoidOp(b.dot(h, w)))
        return [h2, b.add(acc, h2)]

    _, acc = loop(e, 5, [x, e.zeros_like(x)], body)
    return acc


def apply(module: ModuleOp, *passes: ModulePass) -> ModuleOp:
    """Runs `passes` on `module` in place, verifying after each; returns the module."""
    ctx = Context()
    for p in passes:
        p.apply(ctx, module)
        module.verify()
    return module


def ops_named(module: ModuleOp, name: str) -> list[Operation]:
    return [op for op in module.walk() if op.name == name]


def finite_differences(module: ModuleOp, inputs: Sequence[np.ndarray], eps: float = 1e-6):
    """d sum(results[0]) / d inputs by central differences in float64."""

    def f(xs: Sequence[np.ndarray]) -> float:
        return float(np.sum(run(module, args=xs, dtype=np.float64).results[0]))

    grads = []
    for i, x in enumerate(inputs):
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus = [a.copy() for a in inputs]
            minus = [a.copy() for a in inputs]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (f(plus) - f(minus)) / (2 * eps)
        grads.append(g)
    return grads


def random_inputs(shapes: Sequence[Shape], low: float = -1.0, high: float = 1.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(low, high, size=tuple(s)) for s in shapes]


def check_gradients(
    body: Body,
    shapes: Sequence[Shape],
    *,
    inputs: Sequence[np.ndarray] | None = None,
    low: float = -1.0,
    high: float = 1.0,
    decompose: str = "no",
    square: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-7,
) -> ModuleOp:
    """tg-autodiff's gradients of `body` against central finite differences (float64).

    `decompose`: "no", "before" or "after" tg-autodiff. Returns the differentiated module.
    """
    xs = list(inputs) if inputs is not None else random_inputs(shapes, low, high)
    forward = build(body, shapes, square=square)
    passes: list[ModulePass] = [TgAutodiffPass()]
    if decompose == "before":
        passes.insert(0, TgDecomposePass())
    elif decompose == "after":
        passes.append(TgDecomposePass())
    module = apply(build(body, shapes, grad=True, square=square), *passes)
    assert not ops_named(module, "tg.grad")
    result = run(module, args=xs, dtype=np.float64).results
    expected = finite_differences(forward, xs)
    for i, (got, want) in enumerate(zip(result[1:], expected, strict=True)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"gradient {i}")
    return module


__all__ = [
    "build",
    "loop",
    "apply",
    "ops_named",
    "check_gradients",
    "random_inputs",
    "run",
    "model_loc",
]
