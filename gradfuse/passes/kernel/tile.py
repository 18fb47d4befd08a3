"""`kernel-tile`: marks the contractions that the CUDA target stages through shared memory.

A contraction with two parallel dims M and N such that every read that moves with
the reduction depends on M or on N but not on both (rows and columns of a matrix
product; a convolution's output channels, read by its weights, and output columns,
read by its im2col input) gets `gradfuse.tile = array<i64: TM, TN, TK, m, n>`;
`tile_lowering` then gives it one block per TMxTN output tile that stages TMxTK and
TKxTN slices of those reads in shared memory, K chunk by K chunk:

```
kernel.kernel "k0" contraction domain [2, 64, 64, 32] parallel 3 (%x, %w, %h)
    {gradfuse.tile = array<i64: 16, 16, 16, 1, 2>} { ... }
```

Only the `cuda` pipeline runs it (`kernels,kernel-tile,kernel-block-reduce,
kernel-plan-buffers,convert-kernel-to-gpu`): the C
backend blocks contractions in registers instead (`loops-unroll-jam`). Kernels inside
a horizontal group or a row-by-row run keep their launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import AffineBinaryOpExpr, AffineDimExpr, AffineExpr
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel as K
from gradfuse.dialects.tg_base import i64_array

TILE_ATTR = "gradfuse.tile"


def dims_of(expr: AffineExpr) -> set[int]:
    """The domain dims an affine expression reads: `d0 * 4 + d2` -> {0, 2}."""
    if isinstance(expr, AffineDimExpr):
        return {expr.position}
    if isinstance(expr, AffineBinaryOpExpr):
        return dims_of(expr.lhs) | dims_of(expr.rhs)
    return set()


def load_dims(op: K.LoadOp) -> set[int]:
    """The domain dims a load's map and guard read."""
    found: set[int] = set()
    for e in op.map.data.results:
        found |= dims_of(e)
    if op.guard is not None:
        for c in op.guard.data.constraints:
            found |= dims_of(c.lhs) | dims_of(c.rhs)
    return found


def tile_dims(k: K.KernelOp, tm: int, tn: int, tk: int) -> tuple[int, int] | None:
    """The parallel dims (m, n) to tile `k` over, or None when it does not tile (see the
    module docstring). n is the last parallel dim where it can be (stores then go to
    consecutive addresses), m the largest that fits."""
    sizes, npar = k.domain_sizes, k.num_parallel
    if k.kind.data != "contraction" or npar < 2 or npar == len(sizes) or prod(sizes[npar:]) < tk:
        return None
    reduced = set(range(npar, len(sizes)))
    moving: list[set[int]] = []
    for op in k.phases()[0]:  # the prologue
        if isinstance(op, K.LoadOp):
            if load_dims(op) & reduced:
                moving.append(load_dims(op))
        elif op.dialect_name() not in (arith.Arith.name, math.Math.name) or op.regions:
            return None  # stores, gathers, random numbers: computed per point, not staged
    for n in reversed(range(npar)):
        ms = sorted((m for m in range(npar) if m != n), key=lambda m: -sizes[m])
        for m in ms:
            fits = sizes[m] >= tm and sizes[n] >= tn
            if fits and not any(m in dims and n in dims for dims in moving):
                return m, n
    return None


@dataclass(frozen=True)
class KernelTilePass(ModulePass):
    """Marks tileable contractions with their tile sizes.

    `ir-opt model.tg -p kernels,kernel-tile{tm=16 tn=16 tk=16}`
    """

    name = "kernel-tile"
    tm: int = 16
    tn: int = 16
    tk: int = 16

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k in op.walk():
            if not isinstance(k, K.KernelOp) or isinstance(k.parent_op(), K.LAUNCH_GROUPS):
                continue
            if (dims := tile_dims(k, self.tm, self.tn, self.tk)) is not None:
                k.attributes[TILE_ATTR] = i64_array([self.tm, self.tn, self.tk, *dims])
