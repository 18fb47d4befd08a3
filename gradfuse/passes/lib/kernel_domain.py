"""Rewriting a kernel's domain: every access map, guard and index use follows a
substitution of the old dims by expressions of the new ones (`redomain`).

`kernel-squeeze` drops unit dims (each becomes 0). `kernel-fuse-rows` splits a flat
first dim in two (`split_first`): a linear layer on [B, T, C] runs over rows [B*T]
(`linear` flattens its input so that the bias is the contraction's epilogue), and a
conv1d's im2col dot over [N*L]; their accesses read the flat index back as
`d0 floordiv T` and `d0 mod T`. Such a kernel cannot join a run over [B] until its
first dim is [B, T] again:

```
kernel.kernel "k5" contraction domain [896, 128, 1] parallel 2
  %a = kernel.load %e[affine_map<(d0, d1, d2) -> (d0 floordiv 14, d0 mod 14)>]
// split into [64, 14]: d0 = 14 * d0' + d1'
kernel.kernel "k5" contraction domain [64, 14, 128, 1] parallel 3
  %a = kernel.load %e[affine_map<(d0, d1, d2, d3) -> (d0, d1)>]
```

The substitution is exact for any access (a bijection between [896] and [64, 14]);
`affine.simplify` turns the divisions back into plain dims where they were one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from math import prod
from typing import cast

from xdsl.dialects import arith
from xdsl.dialects.builtin import AffineMapAttr, AffineSetAttr, IndexType, IntegerAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineConstantExpr,
    AffineConstraintExpr,
    AffineDimExpr,
    AffineExpr,
    AffineSet,
)

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.dialects.kernel_rows import RowsOp
from gradfuse.dialects.tg_base import i64_array, ints

ACCESS = (K.LoadOp, K.StoreOp, K.GatherOp, K.ScatterAddOp, K.RandomOp)


def redomain(
    k: K.KernelOp, sizes: Sequence[int], parallel: int, subst: Sequence[AffineExpr]
) -> None:
    """Gives `k` the domain `sizes` (`parallel` of them parallel) in place (a new body
    block), old dim i becoming `subst[i]` over the new dims: a map over the parallel dims
    only (the epilogue's) takes the leading part of `subst`. An old index used other
    than in a map must become a new dim or a constant."""
    old_sizes, npar = k.domain_sizes, k.num_parallel
    old = k.body.block
    ops = list(old.ops)
    reduces = [i for i, op in enumerate(ops) if isinstance(op, K.ReduceOp)]
    split = reduces[-1] + 1 if reduces else 0
    block = Block(arg_types=[IndexType()] * len(sizes) + [a.type for a in k.buffer_args])
    constants: dict[int, SSAValue] = {}
    for arg, e in zip(old.args[: len(old_sizes)], subst):
        if isinstance(e, AffineDimExpr):
            arg.replace_all_uses_with(block.args[e.position])
        elif arg.uses:
            assert isinstance(e, AffineConstantExpr), f"index {arg} used outside a map"
            if e.value not in constants:
                c = arith.ConstantOp(IntegerAttr(e.value, IndexType()))
                block.add_op(c)
                constants[e.value] = c.result
            arg.replace_all_uses_with(constants[e.value])
    for arg, new in zip(old.args[len(old_sizes) :], block.args[len(sizes) :]):
        arg.replace_all_uses_with(new)
    for n, op in enumerate(ops):
        op.detach()
        block.add_op(op)
        if not isinstance(op, ACCESS):
            continue
        rank, new_rank = (npar, parallel) if n >= split else (len(old_sizes), len(sizes))
        m = op.map.data
        syms = [AffineExpr.symbol(s) for s in range(m.num_symbols)]
        mapped = m.replace_dims_and_symbols(subst[:rank], syms, new_rank, m.num_symbols)
        if not m.num_symbols:  # (simplify knows dims only)
            mapped = affine.simplify(mapped, sizes[:new_rank])
        op.properties["map"] = AffineMapAttr(mapped)
        guard = getattr(op, "guard", None)
        if guard is not None:
            op.properties["guard"] = AffineSetAttr(_guard(guard.data, subst[:rank], new_rank))
    region = k.regions[0]
    region.detach_block(old)
    region.add_block(block)
    old.erase()
    k.properties["domain"] = i64_array(sizes)
    k.properties["parallel"] = IntegerAttr(parallel, 64)


def _guard(s: AffineSet, subst: Sequence[AffineExpr], rank: int) -> AffineSet:
    syms = [AffineExpr.symbol(i) for i in range(s.num_symbols)]
    return AffineSet(
        rank,
        s.num_symbols,
        tuple(
            AffineConstraintExpr(
                c.kind,
                c.lhs.replace_dims_and_symbols(list(subst), syms),
                c.rhs.replace_dims_and_symbols(list(subst), syms),
            )
            for c in s.constraints
        ),
    )


def simplify_guards(k: K.KernelOp, dropped: dict[Operation, set[int]] | None = None) -> None:
    """Each guard of `k` without the constraints at the positions `dropped` gives for its
    op (ones that now hold by construction), then simplified over `k`'s domain
    (`affine.simplify_guard`); a guard left with none is removed."""
    sizes = k.domain_sizes
    for op in k.body.block.ops:
        guard = getattr(op, "guard", None)
        if guard is None:
            continue
        s, gone = guard.data, (dropped or {}).get(op, set())
        kept = tuple(c for n, c in enumerate(s.constraints) if n not in gone)
        simpler = affine.simplify_guard(
            AffineSet(s.num_dims, s.num_symbols, kept), sizes[: s.num_dims]
        ) if kept else None  # fmt: skip
        if simpler is None:
            del op.properties["guard"]
        else:
            op.properties["guard"] = AffineSetAttr(simpler)


def kernels_and_rows(module: Operation) -> Iterator[tuple[K.KernelOp, int]]:
    """Each kernel in `module` with the number of its leading dims that are the rows of
    its `kernel.rows` (0 outside one): the dims a domain rewrite must leave alone."""
    for k in list(module.walk()):
        if isinstance(k, K.KernelOp):
            parent = k.parent_op()
            yield k, len(ints(parent.rows)) if isinstance(parent, RowsOp) else 0


def split_first(k: K.KernelOp, lead: tuple[int, ...]) -> K.KernelOp | None:
    """A copy of `k` whose first parallel dim is split into `lead` (their product is its
    size), or None when the body uses that dim's index other than in an access map."""
    sizes = k.domain_sizes
    if k.num_parallel < 1 or prod(lead) != sizes[0] or len(lead) < 2:
        return None
    if k.body.block.args[0].uses:
        return None  # (a compare on d0: it would need the index computed from the new dims)
    extra = len(lead) - 1
    new_dims = affine.dims(len(sizes) + extra)
    strides = affine.strides_of(lead)
    first = new_dims[0] * strides[0]
    for d, stride in zip(new_dims[1 : len(lead)], strides[1:]):
        first = first + d * stride
    new = cast(K.KernelOp, k.clone())
    redomain(new, (*lead, *sizes[1:]), k.num_parallel + extra, [first, *new_dims[len(lead) :]])
    return new
