"""`kernel-split-dims`: a dim that the accesses read as `d floordiv c` and `d mod c`
becomes two dims, `[size / c, c]`.

A view that splits an axis (attention's heads: [B, T, 64] as [B, T, 4, 16]) and a
permute leave kernels whose flat dim runs across the blocks of another buffer's
layout: `x[d1 floordiv 16, d0, d1 mod 16]` is contiguous along `d1` only 16 elements at
a time, and computing the division and the remainder for every point costs more than
the work. Split, the inner dim reads contiguously (a CPU loop vectorises it) and the
accesses are plain dims again. This is `split_first`'s substitution (`kernel_domain.py`)
for any dim: `d = c * d' + d''`, exact because it is a bijection. A dim whose index
the body uses other than in an access map, and the row dims of a `kernel.rows`, stay:

```
kernel.kernel "k3" contraction domain [64, 64, 32] parallel 2
  %a = kernel.load %x[affine_map<(d0, d1, d2) -> (d2 floordiv 16, d1 floordiv 16, d2 mod 16, d1 mod 16)>]
// becomes
kernel.kernel "k3" contraction domain [64, 4, 16, 2, 16] parallel 3
  %a = kernel.load %x[affine_map<(d0, d1, d2, d3, d4) -> (d3, d1, d4, d2)>]
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
)
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel as K
from gradfuse.passes.lib.kernel_domain import ACCESS, kernels_and_rows, redomain, simplify_guards

DIVIDING = (AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.Mod)


def _divisors(e: AffineExpr, found: dict[int, set[int]]) -> None:
    """Adds to `found` each `d floordiv c` and `d mod c` of a bare dim in `e`."""
    if not isinstance(e, AffineBinaryOpExpr):
        return
    if (
        e.kind in DIVIDING
        and isinstance(e.lhs, AffineDimExpr)
        and isinstance(e.rhs, AffineConstantExpr)
    ):
        found.setdefault(e.lhs.position, set()).add(e.rhs.value)
    _divisors(e.lhs, found)
    _divisors(e.rhs, found)


def split_points(k: K.KernelOp, first: int = 0) -> dict[int, int]:
    """The dims of `k` (from `first`) to split, each with its inner size: the smallest
    divisor of its size that an access divides it by."""
    found: dict[int, set[int]] = {}
    for op in k.body.block.ops:
        if isinstance(op, ACCESS):
            for e in op.map.data.results:
                _divisors(e, found)
    sizes, args = k.domain_sizes, k.body.block.args
    points: dict[int, int] = {}
    for d, cs in found.items():
        good = [c for c in cs if 1 < c < sizes[d] and sizes[d] % c == 0]
        if d >= first and good and not args[d].uses:
            points[d] = min(good)
    return points


def split(k: K.KernelOp, points: dict[int, int]) -> None:
    """Splits each dim `d` of `k` in `points` into `[size / c, c]` in place."""
    sizes, npar = k.domain_sizes, k.num_parallel
    new_sizes: list[int] = []
    subst: list[AffineExpr] = []
    for d, size in enumerate(sizes):
        here = AffineExpr.dimension(len(new_sizes))
        if d in points:
            c = points[d]
            subst.append(here * c + AffineExpr.dimension(len(new_sizes) + 1))
            new_sizes += [size // c, c]
        else:
            subst.append(here)
            new_sizes.append(size)
    parallel = npar + sum(d < npar for d in points)
    redomain(k, new_sizes, parallel, subst)
    simplify_guards(k)  # (a padded window's guard: its divisions gone too)


def split_dims(k: K.KernelOp, first: int = 0) -> bool:
    """Splits `k`'s divided dims until none is left; whether any was."""
    changed = False
    while points := split_points(k, first):
        split(k, points)
        changed = True
    return changed


@dataclass(frozen=True)
class KernelSplitDimsPass(ModulePass):
    """Splits the dims that accesses divide into blocks into an outer and an inner dim.

    `ir-opt model.tg -p kernels,kernel-split-dims -t kernels`
    """

    name = "kernel-split-dims"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k, rows in kernels_and_rows(op):
            split_dims(k, rows)
