"""Kernel functions of the `cpu` pipeline (`convert-kernel-to-loops` and the `loop-*`
passes) as C: each loop nest printed as it stands in the IR, loop indices named after
their domain dims, the loop passes' decisions (`gradfuse.omp`, `gradfuse.simd`) as
OpenMP pragmas. Nothing is recovered from index arithmetic here:

    static void mm(float* __restrict__ v0, float* __restrict__ v1, float* __restrict__ v2) {
      long v3 = 0;
      ...
      #pragma omp parallel for collapse(2)
      for (long d0 = 0; d0 < 2; d0++)
      for (long d1 = 0; d1 < 4; d1++) {
        float v9 = 0.0f;
        #pragma omp simd reduction(+:v9)
        for (long d2 = 0; d2 < 3; d2++) { ... }
        v2[d0 * 4 + d1] = v9;
      }
    }
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from math import prod

from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import IntegerAttr, IntegerType, MemRefType, VectorType, f32
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from gradfuse.affine import strides_of
from gradfuse.backend.cstyle import (
    BINARY,
    CMP,
    CTarget,
    Renderer,
    comparison,
    ctype,
    element_ctype,
    literal,
)
from gradfuse.passes.loops.lanes import WIDTHS
from gradfuse.passes.loops.loop_ir import (
    LOADS,
    OMP,
    REDUCING,
    SIMD,
    Form,
    Write,
    transfer_dim,
    writes,
)

DIM = re.compile(r"d\d+")


VECTORS = (
    "typedef float gf_floatx4 __attribute__((vector_size(16)));\n"
    "typedef uint8_t gf_boolx4 __attribute__((vector_size(4)));\n"
) + "".join(
    f"typedef float gf_floatx{w} __attribute__((vector_size({4 * w})));\n"
    f"typedef uint8_t gf_boolx{w} __attribute__((vector_size({w})));\n"
    f"typedef int32_t gf_intx{w} __attribute__((vector_size({4 * w})));\n"
    f"static inline gf_floatx{w} gf_blendx{w}(gf_intx{w} k, gf_floatx{w} a, gf_floatx{w} b) "
    f"{{ return (gf_floatx{w})((k & (gf_intx{w})a) | (~k & (gf_intx{w})b)); }}\n"
    f"static inline gf_floatx{w} gf_selectx{w}(gf_boolx{w} m, gf_floatx{w} a, gf_floatx{w} b) "
    f"{{ return gf_blendx{w}(__builtin_convertvector(m, gf_intx{w}) != 0, a, b); }}\n"
    f"static inline gf_floatx{w} gf_fmaxfx{w}(gf_floatx{w} a, gf_floatx{w} b) "
    f"{{ return gf_blendx{w}((b > a) | (a != a), b, a); }}\n"
    for w in WIDTHS
)
"""GCC's vector types for the `vector<Wxf32>` that `loops-vectorize` makes (`gf_floatx8`;
`gf_floatx4` and `gf_boolx4` for the columns of a 4 x 8 tile, `loops-transpose-writes`),
for its masks `vector<Wxi1>`, a byte a lane as i1 buffers hold them (`gf_boolx8`), and
a lane-wise select and maximum (fmaxf's result, as `gf_fmaxf`: NaN only where both are)
as blends by a mask of whole lanes (`gf_intx8`, what a vector comparison gives: -1 or
0)."""

SELECT = (
    "static inline float gf_selectf(int c, float a, float b) { union { float f; uint32_t i; }"
    " x = {a}, y = {b}; uint32_t k = -(uint32_t)(c != 0); x.i = (x.i & k) | (y.i & ~k);"
    " return x.f; }\n"
)
"""A select of two floats as a blend of their bits by a mask of the condition
(`LoopRenderer.select`): gcc computes it with no branch."""


class CLoopTarget(CTarget):
    """C for kernel functions, with GCC vector types."""

    prelude = CTarget.prelude + VECTORS + SELECT


@functools.cache
def type_name(ty: Attribute) -> str:
    """The C type of a scalar or of a `vector<Wxf32>` (`gf_floatx32`)."""
    if isinstance(ty, VectorType):
        lanes = ty.get_shape()[0]
        if ty.element_type == IntegerType(1):
            return f"gf_boolx{lanes}"
        return f"gf_{ctype(ty.element_type)}x{lanes}"
    return ctype(ty)


def reductions(loop: scf.ForOp) -> dict[str, list[int]]:
    """The values `loop` carries by how its `scf.yield` combines each (`+` or `max`: the
    only loops that `loops-vectorize` marks): {"+": [0, 1]}."""
    y = loop.body.block.last_op
    assert isinstance(y, scf.YieldOp)
    kinds: dict[str, list[int]] = {}
    for k, v in enumerate(y.operands):
        kinds.setdefault(REDUCING[type(v.owner)], []).append(k)  # type: ignore[index]
    return kinds


def from_data(v: SSAValue) -> bool:
    """Whether `v` is computed from values in memory (a load, or what a loop or an
    `scf.if` yields), not from loop indices alone: a relu's mask, not a padding guard."""
    seen: set[SSAValue] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x in seen or not isinstance(x.owner, Operation):
            continue  # a loop index or an argument
        seen.add(x)
        if isinstance(x.owner, LOADS) or x.owner.regions:
            return True
        stack.extend(x.owner.operands)
    return False


class LoopRenderer(Renderer):
    """Renders kernel functions (`func.func` with `gradfuse.kernel`) as loop nests."""

    def __init__(self) -> None:
        super().__init__(CLoopTarget())
        self.forms: dict[SSAValue, Form | None] = {}  # affine_form's, for a kernel
        self.pointers = 0

    def type_name(self, ty: Attribute) -> str:
        return type_name(ty)

    def fresh(self, v: SSAValue) -> str:
        """Loop indices by their dims' names (`d2`), constants as literals."""
        if isinstance(v.owner, arith.ConstantOp):
            return literal(v.owner)
        if isinstance(v, BlockArgument) and v.name_hint and DIM.fullmatch(v.name_hint):
            return v.name_hint
        return super().fresh(v)

    def kernel(self, fn: Operation) -> str:  # type: ignore[override]
        assert isinstance(fn, func.FuncOp)
        self.names, self.lines, self.forms = {}, [], {}
        self.pointers = 0  # `along`'s, p0, p1, ...
        head = self.head(fn)  # type: ignore[arg-type]
        self.block(fn.body.block.ops, 1)
        return head + "\n".join(self.lines) + "\n}\n"

    def op(self, op: Operation, depth: int) -> None:
        if isinstance(op, arith.ConstantOp):
            return  # printed where used (`name`)
        vectors = op.results and isinstance(op.results[0].type, VectorType)
        if isinstance(op, vector.StoreOp) or (vectors and not isinstance(op, scf.ForOp | scf.IfOp)):
            self.lanes(op, depth)
        elif isinstance(op, scf.ParallelOp):
            self.parallel(op, depth)
        elif isinstance(op, scf.ForOp):
            self.loop(op, depth)
        elif isinstance(op, func.ReturnOp | scf.ReduceOp | memref.DeallocOp):
            pass
        elif isinstance(op, memref.AllocOp | memref.AllocaOp):
            self.scratch(op, depth)
        elif isinstance(op, memref.CollapseShapeOp):  # the same pointer, fewer dims
            self.names[op.result] = self.name(op.src)
        elif isinstance(op, vector.ExtractOp):
            (lane,) = op.static_position.get_values()
            r = self.name(op.result)
            self.emit(f"{type_name(op.result.type)} {r} = {self.name(op.vector)}[{lane}];", depth)
        else:
            super().op(op, depth)

    def select(self, op: arith.SelectOp, a: list[str]) -> str:
        """A select of floats on a condition from data as a blend of their bits
        (`gf_selectf`): gcc compiles `c ? x : 0.0f` in a loop it leaves scalar as a branch,
        which a relu's mask mispredicts half the time (ResNet-18 b8's max-pool gradient,
        one thread, `gradfuse.profiler`: 4.5-4.7 ms a call with the branch, 1.85-1.92 as
        a blend); the same bits either way. A condition of indices alone (a padding
        guard) keeps its branch, which is predicted."""
        if op.result.type == f32 and from_data(op.cond):
            return f"gf_selectf({a[0]}, {a[1]}, {a[2]})"
        return super().select(op, a)

    def scratch(self, op: memref.AllocOp | memref.AllocaOp, depth: int) -> None:
        """A scratch buffer (`loops-pack`) as static storage: the host program calls one
        kernel function at a time, and a static buffer is paged in once, where `malloc`
        would map fresh pages on every call. A `memref.alloca`, private to an iteration
        of a parallel loop (`loops-pack-tiles`), is an array on the thread's stack."""
        ty = op.memref.type
        size = prod(ty.get_shape())
        elt = element_ctype(ty.element_type)
        static = "static " if isinstance(op, memref.AllocOp) else ""
        self.emit(
            f"{static}{elt} {self.name(op.memref)}[{size}] __attribute__((aligned(64)));", depth
        )

    def lanes(self, op: Operation, depth: int) -> None:
        """An op on `vector<W x ...>` values: loads and stores as `memcpy` (gcc makes them
        unaligned vector moves), + - * / as GCC's vector operators, a broadcast as a
        uniform initializer (a loop of lane stores became a chain of inserts), a strided
        read (`vector.transfer_read`) as an initializer of its lanes' elements (gcc
        builds it in a register, where a loop of lane stores to a vector variable is
        compiled at -O2 as scalar stores to the stack and a vector load of them, which
        waits for the stores: a store-forwarding stall a vector), comparisons, selects
        and maxima as whole-vector expressions (`whole_lanes`), anything else lane by lane
        (`for l`: gcc vectorises the little loop)."""
        if isinstance(op, vector.StoreOp):
            v = self.name(op.vector)
            self.emit(
                f"__builtin_memcpy(&{self.index(op.base, op.indices)}, &{v}, sizeof {v});", depth
            )
            return
        r, ty = self.name(op.results[0]), op.results[0].type
        if isinstance(op, arith.AddfOp | arith.SubfOp | arith.MulfOp | arith.DivfOp):
            a, b = (self.name(v) for v in op.operands)
            self.emit(f"{type_name(ty)} {r} = {a} {BINARY[type(op)]} {b};", depth)
            return
        if isinstance(op, vector.ShuffleOp):  # GCC's two-vector shuffle by a lane mask
            n = ty.get_shape()[0]  # type: ignore[attr-defined]
            index = "gf_boolx" if ty.element_type == IntegerType(1) else "gf_intx"  # type: ignore[attr-defined]
            mask = ", ".join(str(k) for k in op.mask.get_values())
            a, b = (self.name(v) for v in op.operands)
            if n != op.v1.type.get_shape()[0]:  # type: ignore[attr-defined]  (a half: fewer lanes)
                shuffled = f"__builtin_shufflevector({a}, {b}, {mask})"
                self.emit(f"{type_name(ty)} {r} = {shuffled};", depth)
                return
            self.emit(
                f"{type_name(ty)} {r} = __builtin_shuffle({a}, {b}, ({index}{n}){{{mask}}});",
                depth,
            )
            return
        if (whole := self.whole_lanes(op)) is not None:
            self.emit(f"{type_name(ty)} {r} = {whole};", depth)
            return
        if isinstance(op, vector.BroadcastOp | vector.TransferReadOp):
            n = ty.get_shape()[0]  # type: ignore[attr-defined]
            if isinstance(op, vector.BroadcastOp):  # a uniform initializer: one vbroadcastss
                elements = [self.name(op.source)] * n
            else:
                elements = self.along(op, n, depth)
            self.emit(f"{type_name(ty)} {r} = ({type_name(ty)}){{{', '.join(elements)}}};", depth)
            return
        self.emit(f"{type_name(ty)} {r};", depth)
        if isinstance(op, vector.LoadOp):
            self.emit(
                f"__builtin_memcpy(&{r}, &{self.index(op.base, op.indices)}, sizeof {r});", depth
            )
        elif isinstance(op, vector.InsertOp):
            (lane,) = op.static_position.get_values()
            self.emit(f"{r} = {self.name(op.dest)};", depth)
            self.emit(f"{r}[{lane}] = {self.name(op.source)};", depth)
        else:
            n = ty.get_shape()[0]  # type: ignore[attr-defined]
            saved = {v: self.name(v) for v in (*op.operands, *op.results)}
            for v in saved:
                self.names[v] = f"{saved[v]}[l]"
            self.declare, start = False, len(self.lines)
            try:
                super().op(op, 0)
            finally:
                self.declare = True
                self.names.update(saved)
            body = " ".join(line.strip() for line in self.lines[start:])
            del self.lines[start:]
            self.emit(f"for (int l = 0; l < {n}; l++) {{ {body} }}", depth)

    def whole_lanes(self, op: Operation) -> str | None:
        """A comparison, select or maximum of `vector<Wxf32>` as one expression on whole
        vectors (a comparison's -1 lanes made 1, the byte an i1 buffer holds for true),
        or None for other ops. Written as loops over lanes, gcc had to unroll and
        re-vectorise each (DCGAN b8's kernels hold 480 selects and 74 comparisons:
        their gcc time, two units on two cores, 9.0 -> 7.3 s)."""
        if not isinstance(op, arith.CmpfOp | arith.SelectOp | arith.MaximumfOp):
            return None
        first, values = op.operands[0].type, op.operands[-1].type  # (a select's mask, else)
        if isinstance(op, arith.SelectOp) and first == IntegerType(1):  # one test: C's ?:
            return "{} ? {} : {}".format(*(self.name(v) for v in op.operands))
        if not isinstance(first, VectorType) or values != VectorType(f32, first.get_shape()):
            return None
        n, a = first.get_shape()[0], [self.name(v) for v in op.operands]
        if isinstance(op, arith.CmpfOp):
            return f"__builtin_convertvector({a[0]} {CMP[comparison(op)]} {a[1]}, gf_boolx{n}) & 1"
        if isinstance(op, arith.SelectOp):
            return f"gf_selectx{n}({a[0]}, {a[1]}, {a[2]})"
        return f"gf_fmaxfx{n}({a[0]}, {a[1]})"

    def along(
        self, op: vector.TransferReadOp | vector.TransferWriteOp, n: int, depth: int
    ) -> list[str]:
        """The elements of a transfer's `n` lanes, along one dim of its buffer
        (`loops-vectorize` makes no other), through a pointer to lane 0 declared here:
        `const float* p2 = &v3[d0 * 8192 + v9 * 16 + d2 * 4 + d3];`, lane 3 (16 apart)
        `p2[48]`. With each lane's own index expression instead, gcc took 13.7 and 12.8 s
        on DCGAN b8's program against 10.8 and 11.2 s (one unit, runs taken alternately)."""
        ty = op.source.type
        assert isinstance(ty, MemRefType)
        stride = strides_of(ty.get_shape())[transfer_dim(op)]
        at, self.pointers = f"p{self.pointers}", self.pointers + 1
        const = "const " if isinstance(op, vector.TransferReadOp) else ""
        elt = element_ctype(ty.element_type)
        self.emit(f"{const}{elt}* {at} = &{self.index(op.source, op.indices)};", depth)
        return [f"{at}[{lane * stride}]" for lane in range(n)]

    def block(self, ops: Iterable[Operation], depth: int) -> None:
        """The ops of a block; a run of `vector.transfer_write`s (the jammed points of a
        nest, stored across its lanes; one write is a run of one) as one scatter."""
        ops = list(ops)
        i = 0
        while i < len(ops):
            run, i = writes(ops, i, self.forms)
            if run:
                self.scatter(run, depth)
            else:
                self.op(ops[i], depth)
                i += 1

    def scatter(self, run: list[Write], depth: int) -> None:
        """Transfer writes lane by lane, all of lane 0 first (`writes`): jammed points'
        lanes a buffer row apart touch a few cache lines at a time, where point by point
        16 lanes 16 KiB apart evict each other from an 8-way L1 (DCGAN's conv4 weight
        gradient: 9 ms lane by lane, 16 ms point by point)."""
        n = run[0].lanes
        rows = [(self.along(w.op, n, depth), self.name(w.op.vector)) for w in run]
        for lane in range(n):
            for at, v in rows:
                self.emit(f"{at[lane]} = {v}[{lane}];", depth)

    def parallel(self, op: scf.ParallelOp, depth: int) -> None:
        """One `for` per dim; `gradfuse.omp` shares them among threads (`collapse`),
        `gradfuse.simd` vectorises the innermost."""
        body = op.body.block
        n = len(body.args)
        omp = op.attributes.get(OMP)
        simd = SIMD in op.attributes
        if isinstance(omp, IntegerAttr):
            collapse = min(omp.value.data, n - (1 if simd and n > 1 else 0))
            both = " simd" if simd and collapse == n else ""  # one dim, threads and lanes
            simd = simd and not both
            self.emit(f"#pragma omp parallel for{both} collapse({collapse})", depth)
        for k, (iv, lb, ub, st) in enumerate(zip(body.args, op.lowerBound, op.upperBound, op.step)):
            if k == n - 1 and simd:
                self.emit("#pragma omp simd", depth)
            i, lo, hi, step = (self.name(v) for v in (iv, lb, ub, st))
            step = f"{i}++" if step == "1" else f"{i} += {step}"
            self.emit(f"for (long {i} = {lo}; {i} < {hi}; {step})", depth)
        self.emit("{", depth)
        self.block(body.ops, depth + 1)
        self.emit("}", depth)

    def loop(self, op: scf.ForOp, depth: int, declared: bool = False) -> None:
        """`for` with its carried values declared before it; `gradfuse.simd` as `omp simd`
        with a reduction clause per combining op."""
        body = op.body.block
        for res, init, arg in zip(op.results, op.iter_args, body.args[1:]):
            self.emit(f"{type_name(res.type)} {self.name(res)} = {self.name(init)};", depth)
            self.names[arg] = self.name(res)
        if SIMD in op.attributes:
            clauses = [
                f" reduction({kind}:{', '.join(self.name(op.results[k]) for k in ks)})"
                for kind, ks in reductions(op).items()
            ]
            self.emit("#pragma omp simd" + "".join(clauses), depth)
        i, lo, hi, st = (self.name(v) for v in (body.args[0], op.lb, op.ub, op.step))
        step = f"{i}++" if st == "1" else f"{i} += {st}"
        self.emit(f"for (long {i} = {lo}; {i} < {hi}; {step}) {{", depth)
        self.body(op, body, depth + 1)
        self.emit("}", depth)
