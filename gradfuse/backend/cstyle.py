"""The one C-style renderer: lowered gpu/scf/memref/arith/math IR to C or CUDA C.

Targets differ only in class attributes (thread indexing, qualifiers, atomics,
math names), as in tinygrad's `cstyle.py`. `render_kernels(module, CUDATarget())`
gives the translation unit of a module's `gpu.func` kernels:

    extern "C" __global__ void k0(float* __restrict__ v0, float* __restrict__ v1) {
      {
        long v9 = (long)threadIdx.x;
        ...
      }
    }

The c backend's loop renderer (`backend/c/loop_render.py`) extends `Renderer` for the
kernel functions of the `cpu` pipeline, with `CTarget`'s C.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from math import prod

from xdsl.dialects import arith, func, gpu, math, memref, scf
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerType,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects.tg_elementwise import C_FUNCTIONS
from gradfuse.passes.loops.loop_ir import is_kernel

BINARY = {
    arith.AddfOp: "+", arith.SubfOp: "-", arith.MulfOp: "*", arith.DivfOp: "/",
    arith.AddiOp: "+", arith.SubiOp: "-", arith.MuliOp: "*", arith.RemSIOp: "%",
    arith.AndIOp: "&", arith.OrIOp: "|", arith.XOrIOp: "^", arith.DivSIOp: "/",
}  # fmt: skip
UNSIGNED = {arith.DivUIOp: "/", arith.RemUIOp: "%", arith.ShRUIOp: ">>"}
CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
"""C's comparison per `comparison` of an `arith.cmpf` / `arith.cmpi`."""


def comparison(op: arith.CmpfOp | arith.CmpiOp) -> str:
    """The predicate of a comparison without its ordered, unordered or signed prefix:
    `arith.cmpf olt` -> `lt`, `arith.cmpi sge` -> `ge`, `arith.cmpi eq` -> `eq`."""
    names = (
        arith.CMPF_COMPARISON_OPERATIONS
        if isinstance(op, arith.CmpfOp)
        else arith.CMPI_COMPARISON_OPERATIONS
    )
    return names[op.predicate.value.data][-2:]


SPECIAL = {float("inf"): "INFINITY", float("-inf"): "-INFINITY"}
"""C's names of the float constants that have no literal (and NAN, for v != v)."""
CASTS = (
    arith.UIToFPOp,
    arith.SIToFPOp,
    arith.FPToSIOp,
    arith.ExtFOp,
    arith.TruncFOp,
    arith.IndexCastOp,
)


class CStyleLanguage:
    """What every C-family target shares; targets override the attributes."""

    kernel_prefix = "static void"
    dedupe = False  # leave out kernels equal to an earlier one (host code calls that one)
    buffer_type = "{t}* __restrict__"
    exchange_type: str | None = None  # a buffer that the kernel both stores to and loads
    # from, where its threads may pass values to each other through it (None: buffer_type)
    ids: dict[str, str] = {}  # the C of `gpu.thread_id x` and its kin (none: no grid)
    math = {
        **C_FUNCTIONS, math.ExpOp: "expf", math.LogOp: "logf", math.TanhOp: "tanhf",
        math.CosOp: "cosf",
    }  # fmt: skip
    """C functions of math ops: tg's (`C_FUNCTIONS`) and others that lowered IR may hold."""
    maximum = "fmaxf"
    barrier: str | None = None  # the threads of a block wait here (None: the target runs
    # blocks thread by thread, and a kernel with barriers needs its own rendering)
    shared: str | None = None  # the qualifier of a block's workgroup memory (None: none)
    prelude = (
        "#include <math.h>\n#include <stdint.h>\n"
        "static inline long gf_floordiv(long a, long b) { long q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }\n"
    )

    def atomic_add(self, target: str, value: str) -> str:
        return f"#pragma omp atomic\n{target} += {value};"


EXP2F = (
    "static inline float gf_exp2f(float x) {\n"
    "  float c = x < -150.0f ? -150.0f : x > 128.0f ? 128.0f : x;\n"
    "  float n = (c + 12582912.0f) - 12582912.0f;\n"
    "  float f = c - n, p = 1.3215487e-06f;\n"
    "  p = p * f + 1.5252734e-05f; p = p * f + 1.5403530e-04f; p = p * f + 1.3333558e-03f;\n"
    "  p = p * f + 9.6181291e-03f; p = p * f + 5.5504109e-02f; p = p * f + 2.4022651e-01f;\n"
    "  p = p * f + 6.9314718e-01f; p = p * f + 1.0f;\n"
    "  int k = (int)n, k1 = k >> 1, k2 = k - k1;\n"
    "  union { int i; float f; } s1 = {.i = (k1 + 127) << 23}, s2 = {.i = (k2 + 127) << 23};\n"
    "  return p * s1.f * s2.f;\n"
    "}\n"
    "static inline double gf_exp2(double x) { return exp2(x); }\n"
)
"""exp2f as gcc vectorises it (libm's is a call per element): x = n + f, n the nearest
integer (1.5 * 2^23 added and taken away), 2^f by its Taylor polynomial of degree 8
on [-1/2, 1/2], 2^n in two factors (so that 2^-150 .. 2^128 stay normal). Within 0.87
ulp of the exact value (1.06 without FMA) over every float in [-160, 130], checked
against double exp2; NaN, infinities, 0 and subnormal results as exp2f."""


class CTarget(CStyleLanguage):
    """C for gcc: the kernels (OpenMP where a nest is big) and the host program."""

    dedupe = True
    maximum = "gf_fmaxf"  # fmaxf's result (NaN only if both are), but gcc vectorises it,
    # and without a branch in scalar code: `b > a ? b : a` is one maxss and the NaN test a
    # blend (as `(b > a || a != a) ? b : a` it was a jump per call, mispredicted on data:
    # ResNet-18's max pool forward, 3.9 ms a step on one core, is 1.3 ms branch-free)
    math = {**CStyleLanguage.math, math.Exp2Op: "gf_exp2f"}
    prelude = CStyleLanguage.prelude + (
        "static inline float gf_fmaxf(float a, float b) { float m = b > a ? b : a; return a != a ? b : m; }\n"
        "static inline double gf_fmax(double a, double b) { double m = b > a ? b : a; return a != a ? b : m; }\n"
        + EXP2F
    )


class CUDATarget(CStyleLanguage):
    """CUDA C for nvcc: one `__global__` function per kernel."""

    kernel_prefix = 'extern "C" __global__ void'
    ids = {
        "thread_id": "(long)threadIdx.x", "block_id": "(long)blockIdx.x",
        "block_dim": "(long)blockDim.x", "grid_dim": "(long)gridDim.x",
    }  # fmt: skip
    maximum = "fmaxf"
    barrier = "__syncthreads();"
    shared = "__shared__"
    exchange_type = "{t}*"  # not restrict: with it nvcc may read a value that another
    # thread stored before a __syncthreads() from before that barrier (seen on an H200)
    prelude = (
        "#include <stdint.h>\n"
        "__device__ static inline long gf_floordiv(long a, long b) { long q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }\n"
    )

    def atomic_add(self, target: str, value: str) -> str:
        return f"atomicAdd(&{target}, {value});"


def _stored_and_loaded(fn: gpu.FuncOp) -> set[SSAValue]:
    """The kernel's buffers that it both loads from and stores to (atomics included)."""
    loaded = {op.memref for op in fn.walk() if isinstance(op, memref.LoadOp)}
    stored = {op.memref for op in fn.walk() if isinstance(op, memref.StoreOp | memref.AtomicRMWOp)}
    return loaded & stored


def _width(name: str, op: Operation) -> str:
    """A float function's name for the op's result type: `sqrtf` for f32, `sqrt` for f64."""
    if isinstance(op.results[0].type, Float64Type) and name.endswith("f"):
        return name[:-1]
    return name


def ctype(ty: Attribute) -> str:
    """The C type of a scalar type."""
    if isinstance(ty, Float32Type):
        return "float"
    if isinstance(ty, Float64Type):
        return "double"
    if isinstance(ty, IndexType):
        return "long"
    if isinstance(ty, IntegerType):
        return "int" if ty.width.data == 1 else "int64_t" if ty.width.data == 64 else "int32_t"
    raise GradfuseError(f"the C renderer has no type for {ty}")


def element_ctype(ty: Attribute) -> str:
    """The C type of a buffer element: as `ctype`, but i1 is one byte, as buffers plan it."""
    if isinstance(ty, IntegerType) and ty.width.data == 1:
        return "uint8_t"
    return ctype(ty)


def literal(op: arith.ConstantOp) -> str:
    """The C literal of a constant: `255`, `0.5f`, `-INFINITY`."""
    value = op.value
    if isinstance(value, FloatAttr):
        v = value.value.data
        lit = "NAN" if v != v else SPECIAL.get(v, repr(float(v)))
        return f"{lit}f" if ctype(op.result.type) == "float" and lit[-1].isdigit() else lit
    return str(value.value.data)  # type: ignore[attr-defined]


class Renderer:
    """Renders one module for one target."""

    def __init__(self, target: CStyleLanguage):
        self.t = target
        self.names: dict[SSAValue, str] = {}
        self.lines: list[str] = []
        self.declare = True  # results are declared (False: assigned, to an array element)

    def name(self, v: SSAValue) -> str:
        found = self.names.get(v)
        if found is None:
            found = self.names[v] = self.fresh(v)
        return found

    def fresh(self, v: SSAValue) -> str:
        """The name of a value not named yet: `v7`, the 8th named."""
        return f"v{len(self.names)}"

    def emit(self, text: str, depth: int) -> None:
        self.lines.append("  " * depth + text)

    def kernels(self, module: ModuleOp) -> str:
        """Every kernel of `module`; with `dedupe`, a kernel whose text equals an earlier
        one's (a loop body traced twice) is left out and named in `aliases` instead."""
        self.start_kernels()
        return "\n".join([self.t.prelude, *self.more_kernels(module)])

    def start_kernels(self) -> None:
        """Forgets the kernels rendered so far (`more_kernels` adds to them)."""
        self.seen: dict[str, str] = {}  # a kernel's text, its name left out -> its name
        self.aliases: dict[str, str] = {}
        self.kernel_texts: list[str] = []

    def more_kernels(self, module: ModuleOp) -> list[str]:
        """The texts of `module`'s kernels not equal to one rendered before (in this
        module or since `start_kernels`), also appended to `kernel_texts`."""
        out = []
        for op in kernel_ops(module):
            name = op.sym_name.data
            text = self.kernel(op)  # type: ignore[arg-type]
            body = text.replace(f" {name}(", " (", 1)
            if self.t.dedupe and body in self.seen:
                self.aliases[name] = self.seen[body]
                continue
            self.seen[body] = name
            out.append(text)
        self.kernel_texts.extend(out)
        return out

    def kernel(self, fn: gpu.FuncOp) -> str:
        self.names, self.lines = {}, []
        block = fn.body.block
        head = self.head(fn)
        self.block(block.ops, 2)
        return head + "  {\n" + "\n".join(self.lines) + "\n  }\n}\n"

    def head(self, fn: gpu.FuncOp) -> str:
        """The kernel's signature, naming its buffers: `static void k0(float* __restrict__
        v0, ...) {`."""
        t = self.t
        exchange = t.exchange_type or t.buffer_type
        exchanged = _stored_and_loaded(fn) if exchange != t.buffer_type else set()
        params = ", ".join(
            (exchange if a in exchanged else t.buffer_type).format(
                t=element_ctype(a.type.element_type)  # type: ignore[attr-defined]
            )
            + f" {self.name(a)}"
            for a in fn.body.block.args
        )
        return f"{self.t.kernel_prefix} {fn.sym_name.data}({params}) {{\n"

    def block(self, ops: Iterable[Operation], depth: int) -> None:
        for op in ops:
            self.op(op, depth)

    def index(self, buffer: SSAValue, indices: Iterable[SSAValue]) -> str:
        ty = buffer.type
        assert isinstance(ty, MemRefType)
        shape = ty.get_shape()
        terms = [
            f"{self.name(i)} * {prod(shape[k + 1 :])}"
            if prod(shape[k + 1 :]) != 1
            else self.name(i)
            for k, i in enumerate(indices)
        ]
        return f"{self.name(buffer)}[{' + '.join(terms) or '0'}]"

    def select(self, op: arith.SelectOp, a: list[str]) -> str:
        """The C of `arith.select` with operands named `a`: `c ? x : y`."""
        return f"{a[0]} ? {a[1]} : {a[2]}"

    def op(self, op: Operation, depth: int) -> None:  # noqa: C901 (one case per op)
        r = self.name(op.results[0]) if op.results else ""
        scalar = op.results and not isinstance(op.results[0].type, MemRefType)
        decl = f"{self.type_name(op.results[0].type)} {r} = " if scalar and self.declare else ""
        decl = decl or (f"{r} = " if op.results else "")
        a = [self.name(v) for v in op.operands]
        if isinstance(op, arith.ConstantOp):
            self.emit(f"{decl}{literal(op)};", depth)
        elif type(op) in BINARY:
            self.emit(f"{decl}{a[0]} {BINARY[type(op)]} {a[1]};", depth)
        elif type(op) in UNSIGNED:
            self.emit(
                f"{decl}(long)((unsigned long)({a[0]}) {UNSIGNED[type(op)]} (unsigned long)({a[1]}));",
                depth,
            )
        elif isinstance(op, arith.FloorDivSIOp):
            self.emit(f"{decl}gf_floordiv({a[0]}, {a[1]});", depth)
        elif isinstance(op, arith.CeilDivUIOp | arith.CeilDivSIOp):
            self.emit(f"{decl}-gf_floordiv(-({a[0]}), {a[1]});", depth)
        elif isinstance(op, arith.MaximumfOp):
            self.emit(f"{decl}{_width(self.t.maximum, op)}({a[0]}, {a[1]});", depth)
        elif isinstance(op, arith.NegfOp):
            self.emit(f"{decl}-{a[0]};", depth)
        elif isinstance(op, arith.CmpfOp | arith.CmpiOp):
            self.emit(f"{decl}{a[0]} {CMP[comparison(op)]} {a[1]};", depth)
        elif isinstance(op, arith.SelectOp):
            self.emit(f"{decl}{self.select(op, a)};", depth)
        elif isinstance(op, CASTS):
            self.emit(f"{decl}({ctype(op.results[0].type)})({a[0]});", depth)
        elif type(op) in self.t.math:
            self.emit(f"{decl}{_width(self.t.math[type(op)], op)}({', '.join(a)});", depth)
        elif (
            isinstance(op, gpu.ThreadIdOp | gpu.BlockIdOp | gpu.BlockDimOp | gpu.GridDimOp)
            and self.t.ids
        ):
            kind = {gpu.ThreadIdOp: "thread_id", gpu.BlockIdOp: "block_id", gpu.BlockDimOp: "block_dim", gpu.GridDimOp: "grid_dim"}[type(op)]  # fmt: skip
            self.emit(f"{decl}{self.t.ids[kind]};", depth)
        elif isinstance(op, memref.LoadOp):
            self.emit(f"{decl}{self.index(op.memref, op.indices)};", depth)
        elif isinstance(op, memref.StoreOp):
            self.emit(f"{self.index(op.memref, op.indices)} = {a[0]};", depth)
        elif isinstance(op, memref.AtomicRMWOp):
            for line in self.t.atomic_add(self.index(op.memref, op.indices), a[0]).split("\n"):
                self.emit(line, depth)
        elif isinstance(op, scf.ForOp):
            self.loop(op, depth)
        elif isinstance(op, scf.IfOp):
            self.branch(op, depth)
        elif isinstance(op, memref.AllocaOp | memref.GetGlobalOp) and self.t.shared is not None:
            ty = op.memref.type
            size = prod(ty.get_shape())  # type: ignore[attr-defined]
            elt = element_ctype(ty.element_type)  # type: ignore[attr-defined]
            self.emit(f"{self.t.shared} {elt} {r}[{size}];", depth)
        elif isinstance(op, gpu.BarrierOp) and self.t.barrier is not None:
            self.emit(self.t.barrier, depth)
        elif isinstance(op, gpu.ReturnOp | scf.YieldOp):
            pass  # yields are assigned by their parent
        else:
            raise GradfuseError(
                f"the C renderer has no form for {op.name}", position_of(op.location)
            )

    def loop(self, op: scf.ForOp, depth: int, declared: bool = False) -> None:
        """`for` with its carried values as variables (declared here unless `declared`)."""
        body = op.body.block
        iv, carried = body.args[0], body.args[1:]
        for res, init, arg in zip(op.results, op.iter_args, carried):
            if not declared:
                self.emit(f"{ctype(res.type)} {self.name(res)} = {self.name(init)};", depth)
            self.names[arg] = self.name(res)
        i = self.name(iv)
        lo, hi, st = self.name(op.lb), self.name(op.ub), self.name(op.step)
        self.emit(f"for (long {i} = {lo}; {i} < {hi}; {i} += {st}) {{", depth)
        self.body(op, body, depth + 1)
        self.emit("}", depth)

    def body(self, op: scf.ForOp | scf.IfOp, block: Block, depth: int) -> None:
        """A loop's or branch's ops, then its `scf.yield` as assignments to `op`'s results."""
        self.block(block.ops, depth)
        y = block.last_op
        if isinstance(y, scf.YieldOp):
            for res, v in zip(op.results, y.operands):
                self.emit(f"{self.name(res)} = {self.name(v)};", depth)

    def type_name(self, ty: Attribute) -> str:
        """The C type of a value (the c backend's loops: its vectors too)."""
        return ctype(ty)

    def branch(self, op: scf.IfOp, depth: int) -> None:
        for res in op.results:
            self.emit(f"{self.type_name(res.type)} {self.name(res)};", depth)
        for k, region in enumerate((op.true_region, op.false_region)):
            if not region.blocks:
                continue
            self.emit(f"if ({self.name(op.cond)}) {{" if k == 0 else "else {", depth)
            self.body(op, region.block, depth + 1)
            self.emit("}", depth)


def kernel_ops(module: ModuleOp) -> Iterator[gpu.FuncOp | func.FuncOp]:
    """The kernels of `module` in program order, found without walking their bodies: the
    `gpu.func`s of its `gpu.module`s, and its kernel `func.func`s (the `cpu` pipeline)."""
    for op in module.ops:
        if isinstance(op, gpu.ModuleOp):
            yield from (fn for fn in op.body.block.ops if isinstance(fn, gpu.FuncOp))
        elif isinstance(op, func.FuncOp) and is_kernel(op):
            yield op


def render_kernels(module: ModuleOp, target: CStyleLanguage) -> str:
    """The kernels of a lowered module as one translation unit for `target`."""
    return Renderer(target).kernels(module)


__all__ = ["CStyleLanguage", "CTarget", "CUDATarget", "Renderer", "render_kernels"]
