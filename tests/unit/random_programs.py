"""Random small training programs, written once and run by gradfuse, PyTorch and NumPy.

A program is data (`Spec`): a chain of steps applied to a fed tensor, each step an
elementwise op, a broadcast with a param, a reduction, a matmul, a view, a slice, a
softmax, a `where` or a `detach`; then a loss, `backward()`, a receiver of every
`.grad`, and an `SGD` step, inside `ir_for` or straight-line. `programs()` draws one
(hypothesis); `run_gradfuse`, `run_torch` and `numpy_loss` run it:

    spec = Spec(x_shape=(2, 3), steps=[("unary", "tanh"), ("matmul", 4)], ...)
    got = run_gradfuse([spec], "c")[0]   # losses, grads by param, final params
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.nn import SGD

Step = tuple[Any, ...]
UNARY = ("exp", "sin", "tanh", "sigmoid", "relu", "abs", "neg", "sqrt", "log", "square")
BINARY = ("+", "-", "*", "/")
_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
OPERANDS = ("param", "param_bcast", "param_mean", "param_slice", "feed_slice", "scalar")


@dataclass
class Spec:
    """One random program: the fed input's shape, the steps, the loss and the optimizer."""

    x_shape: tuple[int, ...]
    steps: list[Step]
    loss: str = "sum"  # sum | mean | square
    iters: int = 2  # 0: one straight-line step, no loop
    momentum: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    params: list[tuple[int, ...]] = field(default_factory=list)  # in order of first use
    feeds: list[tuple[int, ...]] = field(default_factory=list)  # [0] is x


class Program:
    """Makes the params and feeds of a spec on the fly (the first call draws a shape)."""

    def __init__(self, spec: Spec, ops: Ops):
        self.spec, self.ops = spec, ops
        self.params: list[Any] = []
        self.feeds: list[Any] = []

    def param(self, shape: tuple[int, ...]) -> Any:
        self.params.append(self.ops.param(len(self.params), shape))
        return self.params[-1]

    def feed(self, shape: tuple[int, ...]) -> Any:
        self.feeds.append(self.ops.feed(len(self.feeds), shape))
        return self.feeds[-1]


def _bcast_shape(shape: tuple[int, ...], mask: int) -> tuple[int, ...]:
    return tuple(1 if mask >> i & 1 else n for i, n in enumerate(shape))


def _operand(prog: Program, kind: str, shape: tuple[int, ...], arg: int) -> Any:
    ops = prog.ops
    if kind == "param":
        return prog.param(shape)
    if kind == "param_bcast":  # some dims 1, and maybe one rank fewer
        small = _bcast_shape(shape, arg)
        return prog.param(small[1:] if arg & 8 and len(small) > 1 else small)
    if kind == "param_mean":
        return ops.reduce("mean", prog.param((*shape[:-1], 3)), -1, True) if shape else 0.5
    if kind == "param_slice":
        return ops.getitem(prog.param((2 * shape[0], *shape[1:])), (slice(None, None, 2),))
    if kind == "feed_slice":
        return ops.getitem(prog.feed((2 * shape[0], *shape[1:])), (slice(1, None, 2),))
    return 0.5 + arg / 4


def apply(prog: Program, step: Step, v: Any) -> Any:
    """One step on `v` with `prog.ops` (gradfuse, torch or NumPy)."""
    ops, shape, kind = prog.ops, tuple(prog.ops.shape(v)), step[0]
    rank = len(shape)
    if kind == "unary":
        return ops.unary(step[1], v)
    if kind == "binary":
        other = _operand(prog, step[2], shape, step[3])
        if step[1] == "/":  # a denominator away from zero
            return ops.binary("/", v, ops.binary("+", ops.unary("square", other), 1.0))
        return ops.binary(step[1], v, other)
    if kind == "reduce":
        dim = step[2] % rank
        return ops.reduce(step[1], v, dim, step[3] or rank == 1)
    if kind == "matmul":
        return ops.matmul(v, prog.param((shape[-1], step[1])))
    if kind == "softmax":
        return ops.softmax(v, step[1] % rank)
    if kind == "where":
        return ops.where(v, prog.param(shape))
    if kind == "detach":
        return ops.binary("+", ops.detach(v), prog.param(shape))
    if kind == "view":
        return _view(ops, v, shape, step[1])
    return ops.getitem(v, _index(shape, step[1]))


def _view(ops: Ops, v: Any, shape: tuple[int, ...], how: str) -> Any:
    if how == "flatten" and len(shape) >= 2:
        return ops.reshape(v, (*shape[:-2], shape[-2] * shape[-1]))
    if how == "unsqueeze" and len(shape) < 4:
        return ops.reshape(v, (*shape[:1], 1, *shape[1:]))
    if how == "reverse":
        return ops.permute(v, tuple(reversed(range(len(shape)))))
    if how == "swap" and len(shape) >= 2:
        return ops.permute(v, (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2))
    return v


def _index(shape: tuple[int, ...], how: str) -> tuple[Any, ...]:
    if how == "tail" and shape[0] >= 2:
        return (slice(1, None),)
    if how == "stride" and shape[0] >= 2:
        return (slice(None, None, 2),)
    if how == "column" and len(shape) >= 2:
        return (slice(None), 0)
    if how == "last" and shape[-1] >= 2:
        return (Ellipsis, slice(None, shape[-1] - 1))
    if how == "row" and len(shape) >= 2:
        return (shape[0] - 1,)
    return (slice(None),)


def forward(spec: Spec, ops: Ops) -> tuple[Any, Program]:
    """The loss of one step, and the program with its params and feeds."""
    prog = Program(spec, ops)
    v = prog.feed(spec.x_shape)
    for step in spec.steps:
        v = apply(prog, step, v)
    if spec.loss == "mean":
        return ops.reduce("mean", v, None, False), prog
    if spec.loss == "square":
        return ops.reduce("mean", ops.binary("*", v, v), None, False), prog
    return ops.reduce("sum", v, None, False), prog


class Ops:
    """The primitives a step uses, as methods of a tensor library (gradfuse's here)."""

    def __init__(self, spec: Spec, tag: str = ""):
        self.spec, self.tag = spec, tag

    def initial(self, i: int, shape: tuple[int, ...]) -> np.ndarray:
        rng = np.random.default_rng([self.spec.seed, 1, i])
        return (rng.normal(size=shape) * 0.7).astype(np.float32)

    def fed(self, i: int, shape: tuple[int, ...], t: int) -> np.ndarray:
        rng = np.random.default_rng([self.spec.seed, 2, i, t])
        return rng.normal(size=shape).astype(np.float32)

    def shape(self, v: Any) -> tuple[int, ...]:
        return tuple(v.shape)

    def param(self, i: int, shape: tuple[int, ...]) -> Any:
        return gradfuse.Parameter(self.initial(i, shape), name=f"{self.tag}p{i}")

    def feed(self, i: int, shape: tuple[int, ...]) -> Any:
        calls = [0]

        def fn() -> np.ndarray:
            calls[0] += 1
            return self.fed(i, shape, calls[0] - 1)

        return Feeder(fn, shape=list(shape), name=f"{self.tag}x{i}")

    def unary(self, name: str, v: Any) -> Any:
        if name == "square":
            return v * v
        if name == "sqrt":
            return (v * v + 1.0).sqrt()
        if name == "log":
            return (v * v + 0.5).log()
        if name == "exp":
            return v.tanh().exp()
        return -v if name == "neg" else getattr(v, name)()

    def binary(self, op: str, a: Any, b: Any) -> Any:
        return _BINARY[op](a, b)

    def reduce(self, kind: str, v: Any, dim: int | None, keepdim: bool) -> Any:
        kind = "amax" if kind == "max" else kind  # (max(dim) gives values and indices)
        return getattr(v, kind)(dim, keepdim=keepdim) if dim is not None else getattr(v, kind)()

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b

    def softmax(self, v: Any, dim: int) -> Any:
        return v.softmax(dim)

    def where(self, v: Any, other: Any) -> Any:
        return gradfuse.where(v > 0, v, other * 0.5)

    def detach(self, v: Any) -> Any:
        return v.detach()

    def reshape(self, v: Any, shape: tuple[int, ...]) -> Any:
        return v.reshape(*shape)

    def permute(self, v: Any, perm: tuple[int, ...]) -> Any:
        return v.permute(*perm)

    def getitem(self, v: Any, key: tuple[Any, ...]) -> Any:
        return v[key]


@dataclass
class Outcome:
    """What a run gave: the loss and every `.grad` of each iteration, the final params."""

    losses: list[float] = field(default_factory=list)
    grads: list[dict[int, np.ndarray]] = field(default_factory=list)
    params: dict[int, np.ndarray] = field(default_factory=dict)


def record(spec: Spec, tag: str) -> Outcome:
    """Records `spec` into the current gradfuse program; the outcome fills in as the
    program runs (a receiver of the final params follows the loop)."""
    out, ops = Outcome(), Ops(spec, tag)
    holder: dict[str, Any] = {}

    def step() -> None:
        loss, prog = forward(spec, ops)
        if "opt" not in holder:
            holder["params"] = prog.params
            holder["opt"] = SGD(
                prog.params, lr=0.05, momentum=spec.momentum, weight_decay=spec.weight_decay
            )
        holder["opt"].zero_grad()  # (in the body that is traced: each iteration's are fresh)
        loss.backward()
        have = [i for i, p in enumerate(prog.params) if p.grad is not None]
        grads = [prog.params[i].grad for i in have]

        def got(lv: np.ndarray, *gs: np.ndarray) -> None:
            out.losses.append(float(lv))
            out.grads.append({i: np.array(g) for i, g in zip(have, gs)})

        Receiver(got, [loss, *grads], name=f"{tag}received")
        holder["opt"].step()

    if spec.iters:
        ir_for(range(spec.iters), step)
    else:
        step()

    def final(*values: np.ndarray) -> None:
        out.params.update((i, np.array(v)) for i, v in enumerate(values))

    Receiver(final, holder["params"], name=f"{tag}final")
    return out


def record_all(specs: list[Spec]) -> list[Outcome]:
    """The specs recorded one after another into a new program (tags g0, g1, ...)."""
    gradfuse.reset()
    return [record(spec, f"g{k}") for k, spec in enumerate(specs)]


def run_gradfuse(specs: list[Spec], backend: str, dtype: Any = None) -> list[Outcome]:
    """The specs recorded one after another into one program, run on `backend`."""
    outs = record_all(specs)
    execute(backend=backend, dtype=dtype)
    return outs


@st.composite
def programs(draw: st.DrawFn, max_steps: int = 5) -> Spec:
    """A random `Spec`; shapes are followed with NumPy so each step fits its input."""
    from numpy_ops import NumpyOps  # tests/unit: NumPy semantics of the same steps

    rank = draw(st.integers(1, 3))
    x_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    spec = Spec(x_shape, [], seed=draw(st.integers(0, 2**16)))
    for _ in range(draw(st.integers(1, max_steps))):
        spec.steps.append(draw(_step()))
        try:
            forward(spec, NumpyOps(spec))
        except StepDoesNotFit:
            spec.steps.pop()
    if not forward(spec, NumpyOps(spec))[1].params:  # SGD needs a param
        spec.steps.append(("binary", "*", "param", 0))
    spec.loss = draw(st.sampled_from(["sum", "mean", "square"]))
    spec.iters = draw(st.integers(0, 3))
    spec.momentum = draw(st.sampled_from([0.0, 0.0, 0.9]))
    spec.weight_decay = draw(st.sampled_from([0.0, 0.0, 0.01]))
    return spec


class StepDoesNotFit(Exception):
    """A drawn step that makes a tensor too big or too small for these programs."""


def _step() -> st.SearchStrategy[Step]:
    return st.one_of(
        st.tuples(st.just("unary"), st.sampled_from(UNARY)),
        st.tuples(
            st.just("binary"), st.sampled_from(BINARY), st.sampled_from(OPERANDS),
            st.integers(0, 15),
        ),
        st.tuples(
            st.just("reduce"), st.sampled_from(["sum", "mean", "max"]), st.integers(0, 3),
            st.booleans(),
        ),
        st.tuples(st.just("matmul"), st.integers(1, 4)),
        st.tuples(st.just("softmax"), st.integers(0, 3)),
        st.tuples(st.just("where")),
        st.tuples(st.just("detach")),
        st.tuples(st.just("view"), st.sampled_from(["flatten", "unsqueeze", "reverse", "swap"])),
        st.tuples(st.just("slice"), st.sampled_from(["tail", "stride", "column", "last", "row"])),
    )  # fmt: skip
