"""Hand-written kernel-dialect programs with their NumPy meaning, shared by the tests.

Each `Program` is MLIR text of a `func.func @main` over kernel-dialect host ops,
the feeders and params to run it with, and what NumPy says it must produce:

    prog = PROGRAMS["contraction"]
    module = lower(prog.module())                 # after convert-kernel-to-gpu
    prog.check(run_lowered(module, feeders=prog.feeders, params=prog.params))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from gradfuse.backend.interpreters.tg import RunResult
from gradfuse.passes import make_context
from gradfuse.passes.gpu.convert_kernel_to_gpu import ConvertKernelToGpuPass
from gradfuse.passes.kernel.plan_buffers import KernelPlanBuffersPass

Arrays = dict[str, np.ndarray]


def kernel(
    name: str,
    kind: str,
    domain: Sequence[int],
    parallel: int,
    buffers: Sequence[tuple[str, str]],
    body: str,
    loc: str = "",
) -> str:
    """A `kernel.kernel` in generic syntax; the body sees `%i0..` (domain) and `%b0..` (buffers).

    `kernel("k", "elementwise", [4], 1, [("%x", "memref<4xf32>")], "...")`
    """
    dims = ", ".join(map(str, domain))
    idx = [f"%i{n}: index" for n in range(len(domain))]
    args = [f"%b{n}: {t}" for n, (_, t) in enumerate(buffers)]
    operands = ", ".join(v for v, _ in buffers)
    types = ", ".join(t for _, t in buffers)
    return (
        f'"kernel.kernel"({operands}) <{{sym_name = "{name}", kind = "{kind}",'
        f" domain = array<i64: {dims}>, parallel = {parallel} : i64}}> ({{\n"
        f"^bb0({', '.join(idx + args)}):\n{body}}}) : ({types}) -> (){loc}\n"
    )


def loop(n: int, body: str, iv: str = "%it") -> str:
    """A `kernel.for iv = 0 to n step 1` without carried values, in generic syntax."""
    return (
        f'  "kernel.for"() <{{lower = 0 : i64, upper = {n} : i64, step = 1 : i64}}> ({{\n'
        f"  ^bb0({iv}: index):\n{body}"
        f'\n  "kernel.yield"() : () -> ()\n  }}) : () -> ()\n'
    )


def main(body: str, results: str = "") -> str:
    """`func.func @main() -> (results) { body }`."""
    sig = f" -> ({results})" if results else ""
    return f"func.func @main(){sig} {{\n{body}\n}}"


def load(dst: str, buf: str, amap: str, ty: str) -> str:
    return f"  {dst} = kernel.load {buf}[{amap}] : {ty} -> f32\n"


def store(value: str, buf: str, amap: str, ty: str) -> str:
    return f"  kernel.store {value}, {buf}[{amap}] : f32, {ty}\n"


def parse(text: str) -> ModuleOp:
    """A verified module from MLIR text (kernel, tg, func, arith, math, ... dialects)."""
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def lower(module: ModuleOp) -> ModuleOp:
    """`module` after `kernel-plan-buffers,convert-kernel-to-gpu`, verified."""
    ctx = make_context()
    KernelPlanBuffersPass().apply(ctx, module)
    ConvertKernelToGpuPass().apply(ctx, module)
    module.verify()
    return module


def _pairs(got: Any, want: Any) -> list[tuple[Any, Any]]:
    if isinstance(want, list):
        return list(zip(got, want, strict=True))
    return [(got[0], want)]


@dataclass
class Program:
    """A kernel program, its inputs and its NumPy meaning."""

    text: str
    feeders: Arrays = field(default_factory=dict)
    params: Arrays = field(default_factory=dict)
    expected: Callable[[Arrays, Arrays], dict[str, list[Any]]] = lambda f, p: {}
    """Feeders, params -> per receiver key one entry per call (its buffer, or the list
    of its buffers), "param:<key>" -> [final value], "result:<n>" -> [returned value]."""

    def module(self) -> ModuleOp:
        return parse(self.text)

    def check(self, result: RunResult, rtol: float = 1e-5) -> None:
        """Asserts that a run's result is what NumPy says."""
        for key, calls in self.expected(self.feeders, self.params).items():
            kind, _, name = key.partition(":")
            if kind == "param":
                got: list[Any] = [[result.params[name]]]
            elif kind == "result":
                got = [[result.results[int(name)]]]
            else:
                got = result.received.get(key, [])
            assert len(got) == len(calls), f"{key}: {len(got)} calls, expected {len(calls)}"
            for g, want in zip(got, calls):
                for a, b in _pairs(g, want):
                    np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6, err_msg=key)


F35, F3, F5, F0 = "memref<3x5xf32>", "memref<3xf32>", "memref<5xf32>", "memref<f32>"
X23, W43, H24, B4 = "memref<2x3xf32>", "memref<4x3xf32>", "memref<2x4xf32>", "memref<4xf32>"
V46, X34, Y26 = "memref<4x6xf32>", "memref<3x4xf32>", "memref<2x6xf32>"
ID1, ID2 = "affine_map<(d0) -> (d0)>", "affine_map<(d0, d1) -> (d0, d1)>"

# y = max(exp2(x) * 0.5 + b[j], 0): an elementwise chain with a broadcast read.
ELEMENTWISE = main(
    f"  %x = kernel.alloc : {F35}\n  %y = kernel.alloc : {F35}\n"
    f'  %b = kernel.param "b" : {F5}\n  kernel.feed "x", %x : {F35}\n'
    + kernel(
        "ew", "elementwise", [3, 5], 2, [("%x", F35), ("%b", F5), ("%y", F35)],
        load("%a", "%b0", ID2, F35)
        + load("%c", "%b1", "affine_map<(d0, d1) -> (d1)>", F5)
        + "  %e = math.exp2 %a : f32\n  %h = arith.constant 0.5 : f32\n"
        "  %z = arith.constant 0.0 : f32\n  %m = arith.mulf %e, %h : f32\n"
        "  %s = arith.addf %m, %c : f32\n  %r = arith.maximumf %s, %z : f32\n"
        + store("%r", "%b2", ID2, F35),
    )
    + f'  kernel.receive "y", %y : {F35}\n  func.return'
)  # fmt: skip

# out[i] = sqrt(sum_j x^2) + b[i] - max_j x: two reductions and an epilogue.
REDUCE = main(
    f"  %x = kernel.alloc : {F35}\n  %out = kernel.alloc : {F3}\n"
    f'  %b = kernel.param "b" : {F3}\n  kernel.feed "x", %x : {F35}\n'
    + kernel(
        "red", "reduction", [3, 5], 1, [("%x", F35), ("%b", F3), ("%out", F3)],
        load("%a", "%b0", ID2, F35)
        + '  %q = arith.mulf %a, %a : f32\n  %s = kernel.reduce "add" %q : f32\n'
        '  %m = kernel.reduce "max" %a : f32\n'
        + load("%c", "%b1", ID1, F3)
        + "  %r = math.sqrt %s : f32\n  %t = arith.addf %r, %c : f32\n"
        "  %u = arith.subf %t, %m : f32\n" + store("%u", "%b2", ID1, F3),
    )
    + f'  kernel.receive "out", %out : {F3}\n  func.return'
)  # fmt: skip

# loss = sum x^2 over the whole domain (no parallel dims: one thread).
FULL_REDUCE = main(
    f'  %x = kernel.alloc : {F35}\n  %l = kernel.alloc : {F0}\n  kernel.feed "x", %x : {F35}\n'
    + kernel(
        "loss", "reduction", [3, 5], 0, [("%x", F35), ("%l", F0)],
        load("%a", "%b0", ID2, F35)
        + '  %q = arith.mulf %a, %a : f32\n  %s = kernel.reduce "add" %q : f32\n'
        + store("%s", "%b1", "affine_map<() -> ()>", F0),
    )
    + f'  kernel.receive "loss", %l : {F0}\n  func.return'
)  # fmt: skip

# h = relu(x @ w^T + b): a contraction reading w transposed, with an epilogue.
CONTRACTION = main(
    f"  %x = kernel.alloc : {X23}\n  %h = kernel.alloc : {H24}\n"
    f'  %w = kernel.param "w" : {W43}\n  %b = kernel.param "b" {{init = 0.25 : f32}} : {B4}\n'
    f'  kernel.feed "x", %x : {X23}\n'
    + kernel(
        "mm", "contraction", [2, 4, 3], 2, [("%x", X23), ("%w", W43), ("%b", B4), ("%h", H24)],
        load("%a", "%b0", "affine_map<(d0, d1, d2) -> (d0, d2)>", X23)
        + load("%c", "%b1", "affine_map<(d0, d1, d2) -> (d1, d2)>", W43)
        + '  %p = arith.mulf %a, %c : f32 loc("model.py":3:5)\n'
        '  %s = kernel.reduce "add" %p : f32\n'
        + load("%e", "%b2", "affine_map<(d0, d1) -> (d1)>", B4)
        + "  %t = arith.addf %s, %e : f32\n  %z = arith.constant 0.0 : f32\n"
        "  %r = arith.maximumf %t, %z : f32\n" + store("%r", "%b3", ID2, H24),
        ' loc("model.py":7:3)',
    )
    + f'  kernel.receive "h", %h : {H24}\n  func.return'
)  # fmt: skip

# One launch for two independent kernels with different domains (horizontal fusion).
GROUP = main(
    f"  %x = kernel.alloc : {X23}\n  %y = kernel.alloc : {X23}\n"
    f"  %v = kernel.alloc : {V46}\n  %z = kernel.alloc : {B4}\n"
    f'  kernel.feed "x", %x : {X23}\n  kernel.feed "v", %v : {V46}\n'
    '  "kernel.group"() <{sym_name = "both"}> ({\n'
    + kernel(
        "inc", "elementwise", [2, 3], 2, [("%x", X23), ("%y", X23)],
        load("%a", "%b0", ID2, X23)
        + "  %o = arith.constant 1.0 : f32\n  %r = arith.addf %a, %o : f32\n"
        + store("%r", "%b1", ID2, X23),
    )
    + kernel(
        "rowmax", "reduction", [4, 6], 1, [("%v", V46), ("%z", B4)],
        load("%a", "%b0", ID2, V46)
        + '  %m = kernel.reduce "max" %a : f32\n' + store("%m", "%b1", ID1, B4),
    )
    + "  }) : () -> ()\n"
    f'  kernel.receive "yz", %y, %z : {X23}, {B4}\n  func.return'
)  # fmt: skip

# SGD in place inside a loop: w -= 0.1 * g with g fed per step; t = 2 w received per step.
SGD_LOOP = main(
    f'  %w = kernel.param "w" {{init = 1.0 : f32}} : {F3}\n'
    f"  %g = kernel.alloc : {F3}\n  %t = kernel.alloc : {F3}\n"
    + loop(
        3,
        f'  kernel.feed "g", %g : {F3}\n'
        + kernel(
            "sgd", "elementwise", [3], 1, [("%g", F3), ("%w", F3), ("%t", F3)],
            load("%a", "%b0", ID1, F3) + load("%c", "%b1", ID1, F3)
            + "  %lr = arith.constant 0.1 : f32\n  %d = arith.mulf %a, %lr : f32\n"
            "  %n = arith.subf %c, %d : f32\n  %two = arith.constant 2.0 : f32\n"
            "  %m = arith.mulf %n, %two : f32\n"
            + store("%n", "%b1", ID1, F3) + store("%m", "%b2", ID1, F3),
        )
        + f'  kernel.receive "t", %t : {F3}',
    )
    + f"  func.return %w : {F3}",
    F3,
)  # fmt: skip

# Views as access maps: reshape (floordiv/mod), roll ((d0 - 1) mod 4), ceildiv.
VIEWS = main(
    f"  %x = kernel.alloc : {X34}\n  %y = kernel.alloc : {Y26}\n"
    f'  %r = kernel.alloc : {B4}\n  %c = kernel.alloc : {F5}\n  kernel.feed "x", %x : {X34}\n'
    + kernel(
        "reshape", "elementwise", [2, 6], 2, [("%x", X34), ("%y", Y26)],
        load("%a", "%b0",
             "affine_map<(d0, d1) -> ((d0 * 6 + d1) floordiv 4, (d0 * 6 + d1) mod 4)>", X34)
        + store("%a", "%b1", ID2, Y26),
    )
    + kernel(
        "roll", "elementwise", [4], 1, [("%x", X34), ("%r", B4)],
        load("%a", "%b0", "affine_map<(d0) -> (0, (d0 - 1) mod 4)>", X34)
        + store("%a", "%b1", ID1, B4),
    )
    + kernel(
        "ceil", "elementwise", [5], 1, [("%x", X34), ("%c", F5)],
        load("%a", "%b0", "affine_map<(d0) -> (2, d0 ceildiv 2)>", X34)
        + store("%a", "%b1", ID1, F5),
    )
    + f'  kernel.receive "views", %y, %r, %c : {Y26}, {B4}, {F5}\n  func.return'
)  # fmt: skip

# A constant buffer, a compare, a select and an i1 -> f32 conversion.
MASK = main(
    f"  %k = kernel.constant dense<[1.0, 0.0, 2.0]> : tensor<3xf32> : {F3}\n"
    f'  %x = kernel.alloc : {F3}\n  %o = kernel.alloc : {F3}\n  kernel.feed "x3", %x : {F3}\n'
    + kernel(
        "mask", "elementwise", [3], 1, [("%k", F3), ("%x", F3), ("%o", F3)],
        load("%c", "%b0", ID1, F3) + load("%a", "%b1", ID1, F3)
        + "  %h = arith.constant 0.5 : f32\n  %p = arith.cmpf ogt, %c, %h : f32\n"
        "  %m = arith.mulf %a, %c : f32\n  %n = arith.negf %a : f32\n"
        "  %s = arith.select %p, %m, %n : f32\n  %f = arith.uitofp %p : i1 to f32\n"
        "  %r = arith.addf %s, %f : f32\n" + store("%r", "%b2", ID1, F3),
    )
    + f'  kernel.receive "o", %o : {F3}\n  func.return'
)  # fmt: skip


def unary(name: str, src: str, dst: str, expr: str, ty: str = F3) -> str:
    """An elementwise kernel `dst = expr(%a)` over a 1-d buffer of type `ty`."""
    size = int(ty.removeprefix("memref<").split("x")[0])
    return kernel(
        name, "elementwise", [size], 1, [(src, ty), (dst, ty)],
        load("%a", "%b0", ID1, ty) + f"  %r = {expr} : f32\n" + store("%r", "%b1", ID1, ty),
    )  # fmt: skip


# A chain of temporaries in a loop: t3 may reuse t1's memory (the arena starts as NaN).
CHAIN = main(
    "".join(f"  %t{n} = kernel.alloc : {F3}\n" for n in range(4))
    + loop(
        2,
        f'  kernel.feed "x3", %t0 : {F3}\n'
        + unary("double", "%t0", "%t1", "arith.addf %a, %a")
        + unary("square", "%t1", "%t2", "arith.mulf %a, %a")
        + unary("negate", "%t2", "%t3", "arith.negf %a")
        + f'  kernel.receive "chain", %t3 : {F3}',
    )
    + "  func.return"
)


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


X35, B5, B3 = _rand(3, 5), _rand(5, seed=1), _rand(3, seed=2)
X2, W4, V, G = _rand(2, 3, seed=3), _rand(4, 3, seed=4), _rand(4, 6, seed=5), _rand(3, 3, seed=6)
X3x4 = _rand(3, 4, seed=7)


def _sgd(f: Arrays, p: Arrays) -> dict[str, list[Any]]:
    w, ts = np.ones(3, np.float32), []
    for g in f["g"]:
        w = w - g * np.float32(0.1)
        ts.append(2 * w)
    return {"t": ts, "param:w": [w], "result:0": [w]}


def _views(f: Arrays, p: Arrays) -> dict[str, list[Any]]:
    x = f["x"]
    return {"views": [[x.reshape(2, 6), np.roll(x[0], 1), x[2, [0, 1, 1, 2, 2]]]]}


def _mask(f: Arrays, p: Arrays) -> dict[str, list[Any]]:
    x, k = f["x3"], np.array([1, 0, 2], np.float32)
    return {"o": [np.where(k > 0.5, x * k, -x) + (k > 0.5)]}


PROGRAMS: dict[str, Program] = {
    "elementwise": Program(
        ELEMENTWISE, {"x": X35}, {"b": B5},
        lambda f, p: {"y": [np.maximum(np.exp2(f["x"]) * 0.5 + p["b"], 0)]},
    ),
    "reduce": Program(
        REDUCE, {"x": X35}, {"b": B3},
        lambda f, p: {"out": [np.sqrt((f["x"] ** 2).sum(1)) + p["b"] - f["x"].max(1)]},
    ),
    "full_reduce": Program(
        FULL_REDUCE, {"x": X35}, {}, lambda f, p: {"loss": [(f["x"] ** 2).sum()]}
    ),
    "contraction": Program(
        CONTRACTION, {"x": X2}, {"w": W4},
        lambda f, p: {"h": [np.maximum(f["x"] @ p["w"].T + 0.25, 0)]},
    ),
    "group": Program(
        GROUP, {"x": X2, "v": V}, {}, lambda f, p: {"yz": [[f["x"] + 1, f["v"].max(1)]]}
    ),
    "sgd_loop": Program(SGD_LOOP, {"g": G}, {}, _sgd),
    "views": Program(VIEWS, {"x": X3x4}, {}, _views),
    "mask": Program(MASK, {"x3": B3}, {}, _mask),
    "chain": Program(
        CHAIN, {"x3": np.stack([B3, 2 * B3])}, {},
        lambda f, p: {"chain": [-((2 * x) ** 2) for x in f["x3"]]},
    ),
}  # fmt: skip
"""Every sample program by name."""
