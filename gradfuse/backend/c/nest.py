"""A reduction loop `k` over [0, K) as nested loops without divisions.

A convolution's reduction runs over input channels x kernel rows x kernel columns as
one index `k`, and its im2col reads take it apart again with `k / 16`, `(k / 4) % 4`
and `k % 4` at every step. `nest(loop)` finds the radices of those reads; `Nest.open`
renders the loop as one loop per radix and names each read after the loop indices:

    for (long v25_0 = 0; v25_0 < 128; v25_0++)
    for (long v25_1 = 0; v25_1 < 4; v25_1++)
    for (long v25_2 = 0; v25_2 < 4; v25_2++) {
      long v25 = ((v25_0) * 4 + v25_1) * 4 + v25_2;
      ... v1[(v25_0) * 1024 + i1 * 16 + (v25_1) * 4 + (v25_2)] ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from gradfuse.backend.cstyle import Renderer
from gradfuse.passes.loops.loop_ir import int_constant as constant


@dataclass
class Nest:
    """The loop `iv` over [0, count) as nested loops of `sizes` (outermost first); `forms`
    holds its `k / C`, `k % C` reads as `k / d % m`, which the loops compute."""

    iv: SSAValue
    count: int
    sizes: list[int]
    forms: dict[SSAValue, tuple[int, int]] = field(default_factory=dict)
    ops: set[Operation] = field(default_factory=set)  # the divisions that the loops replace

    def strides(self) -> list[int]:
        """What one step of each loop adds to k, outermost first."""
        out, stride = [], 1
        for size in reversed(self.sizes):
            out.append(stride)
            stride *= size
        return out[::-1]

    def loops(self, d: int, m: int) -> list[int]:
        """The loops (outermost first) that `k / d % m` is made of."""
        return [t for t, s in enumerate(self.strides()) if s >= d and s * self.sizes[t] <= d * m]

    def expr(self, k: str, d: int, m: int) -> str:
        """`k / d % m` as C over the loop indices `{k}_{t}` (Horner's rule)."""
        text = ""
        for t in self.loops(d, m):
            var = f"{k}_{t}"
            text = var if not text else f"({text}) * {self.sizes[t]} + {var}"
        return text or "0"

    def depends(self, v: SSAValue, t: int) -> bool:
        """Whether the read `v` (or the index itself) changes with loop `t`."""
        if v is self.iv:
            return True
        return v in self.forms and t in self.loops(*self.forms[v])

    def name(self, r: Renderer) -> str:
        """Names the reads after the loop indices; returns the name of k."""
        k = r.name(self.iv)
        for v, (d, m) in self.forms.items():
            r.names[v] = f"({self.expr(k, d, m)})"
        return k

    def name_from(self, r: Renderer, k: str) -> None:
        """Names the reads as divisions of `k` (for a loop over a list of k's)."""
        for v, (d, m) in self.forms.items():
            div = f"{k} / {d}" if d > 1 else k
            r.names[v] = f"({div} % {m})" if d * m < self.count else f"({div})"

    def index(self, r: Renderer, buffer: SSAValue, indices: Sequence[SSAValue]) -> str:
        """`r.index(buffer, indices)`, where the reads of k among the indices, each times
        its stride, add up to k times one stride (`x[k / 20][k % 20][c]` of an
        x[35][20][200]), with that sum as `k * 200`: no division for each k."""
        ty = buffer.type
        assert isinstance(ty, MemRefType)
        shape = ty.get_shape()
        mine = sorted(
            (
                (self.forms[v], prod(shape[q + 1 :]), q)
                for q, v in enumerate(indices)
                if v in self.forms
            ),
            reverse=True,
        )  # outermost (largest divisor) first
        if len(mine) < 2:
            return r.index(buffer, indices)
        unit = mine[-1][1]
        (d0, m0), (d1, _) = mine[0][0], mine[-1][0]
        whole = d0 * m0 >= self.count and d1 == 1
        nested = all(d == e * n for ((d, _), _, _), ((e, n), _, _) in zip(mine, mine[1:]))
        if not whole or not nested or any(s != d * unit for (d, _), s, _ in mine):
            return r.index(buffer, indices)
        k = r.name(self.iv)
        terms = [
            f"{r.name(v)} * {prod(shape[q + 1 :])}" if prod(shape[q + 1 :]) != 1 else r.name(v)
            for q, v in enumerate(indices)
            if v not in self.forms
        ]
        terms.append(f"{k} * {unit}" if unit != 1 else k)
        return f"{r.name(buffer)}[{' + '.join(terms)}]"

    def open(self, r: Renderer, depth: int, order: list[int] | None = None) -> int:
        """Emits the loops (in `order`, outermost first) and `long k = ...;` inside the
        innermost one's brace; returns the depth of the body (close with one brace)."""
        k = self.name(r)
        order = list(range(len(self.sizes))) if order is None else order
        for n, t in enumerate(order):
            brace = " {" if n == len(order) - 1 else ""
            r.emit(f"for (long {k}_{t} = 0; {k}_{t} < {self.sizes[t]}; {k}_{t}++){brace}", depth)
        r.emit(f"long {k} = {self.expr(k, 1, self.count)};", depth + 1)
        return depth + 1


def nest(loop: scf.ForOp) -> Nest | None:
    """The nest of a loop over [0, K) step 1 (None for other loops): one loop per radix of
    its index's `k / C`, `k % C` (and of those) reads where the radices nest (each divides
    the next), else one loop."""
    lo, hi, st = constant(loop.lb), constant(loop.ub), constant(loop.step)
    if lo != 0 or st != 1 or hi is None or hi < 1:
        return None
    iv = loop.body.block.args[0]
    forms: dict[SSAValue, tuple[int, int]] = {iv: (1, hi)}  # value = k / d % m
    ops: set[Operation] = set()
    for op in loop.body.block.ops:
        if not isinstance(op, arith.DivUIOp | arith.RemUIOp) or op.lhs not in forms:
            continue
        c, (d, m) = constant(op.rhs), forms[op.lhs]
        if not c or c < 1 or m % c:
            continue
        forms[op.result] = (d * c, m // c) if isinstance(op, arith.DivUIOp) else (d, c)
        ops.add(op)
    bounds = sorted({b for d, m in forms.values() for b in (d, d * m)})
    if len(bounds) < 2 or any(b % a for a, b in zip(bounds, bounds[1:])):
        return Nest(iv, hi, [hi])  # one loop (also for a loop of one iteration)
    del forms[iv]
    sizes = [b // a for a, b in zip(bounds, bounds[1:])][::-1]
    return Nest(iv, hi, sizes, forms, ops)
