"""`kernel-squeeze`: kernel domains without their dims of size 1.

A batch norm's variance, kept as `[1, C, 1, 1]`, makes a kernel over
`[1, C, 1, 1 | N, H, W]` while its mean's runs over `[C | N, H, W]`: the same rows,
written two ways. Without the unit dims (index 0 in every access map) both run over
`[C | N, H, W]`, and `kernel-fuse-rows` can put them in one launch:

```
kernel.kernel "k2" reduction domain [1, 512, 1, 1, 128, 4, 4] parallel 4
  %a = kernel.load %x[affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d4, d1, d5, d6)>]
  kernel.store %v, %var[affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>]
// becomes
kernel.kernel "k2" reduction domain [512, 128, 4, 4] parallel 1
  %a = kernel.load %x[affine_map<(d0, d1, d2, d3) -> (d1, d0, d2, d3)>]
  kernel.store %v, %var[affine_map<(d0) -> (0, d0, 0, 0)>]
```

A kernel keeps one reduction dim while it reduces, and one dim at least.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import AffineMapAttr, AffineSetAttr, IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block
from xdsl.ir.affine import AffineConstraintExpr, AffineExpr, AffineSet
from xdsl.passes import ModulePass

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.dialects.tg_base import i64_array

ACCESS = (K.LoadOp, K.StoreOp, K.GatherOp, K.ScatterAddOp, K.RandomOp)


def _kept(sizes: tuple[int, ...], npar: int) -> list[int]:
    keep = [i for i, s in enumerate(sizes) if s != 1]
    if npar < len(sizes) and not any(i >= npar for i in keep):
        keep.append(len(sizes) - 1)  # a reduction keeps a reduction dim
    return keep or [0]


def _substitution(keep: list[int], rank: int) -> list[AffineExpr]:
    """Old dim i -> its new dim, or 0 when dropped (for maps over the first `rank` dims)."""
    new = [k for k in keep if k < rank]
    return [
        AffineExpr.dimension(new.index(i)) if i in new else AffineExpr.constant(0)
        for i in range(rank)
    ]


def squeeze(k: K.KernelOp) -> bool:
    """Drops the unit dims of `k`'s domain in place (a new body block); whether any went."""
    sizes, npar = k.domain_sizes, k.num_parallel
    if not sizes:
        return False
    keep = _kept(sizes, npar)
    if len(keep) == len(sizes):
        return False
    new_sizes = [sizes[i] for i in keep]
    new_npar = sum(i < npar for i in keep)
    old = k.body.block
    ops = list(old.ops)
    reduces = [i for i, op in enumerate(ops) if isinstance(op, K.ReduceOp)]
    split = reduces[-1] + 1 if reduces else 0
    block = Block(arg_types=[IndexType()] * len(new_sizes) + [a.type for a in k.buffer_args])
    zero = None
    for i, arg in enumerate(old.args[: len(sizes)]):
        if i in keep:
            arg.replace_all_uses_with(block.args[keep.index(i)])
        elif arg.uses:
            if zero is None:
                zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
                block.add_op(zero)
            arg.replace_all_uses_with(zero.result)
    for arg, new in zip(old.args[len(sizes) :], block.args[len(new_sizes) :]):
        arg.replace_all_uses_with(new)
    for n, op in enumerate(ops):
        op.detach()
        block.add_op(op)
        if isinstance(op, ACCESS):
            rank, new_rank = (npar, new_npar) if n >= split else (len(sizes), len(new_sizes))
            subst = _substitution(keep, rank)
            dims = new_sizes[:new_rank]
            m = op.map.data
            mapped = m.replace_dims_and_symbols(
                subst, [AffineExpr.symbol(s) for s in range(m.num_symbols)], new_rank, m.num_symbols
            )
            if not m.num_symbols:  # (simplify knows dims only)
                mapped = affine.simplify(mapped, dims)
            op.properties["map"] = AffineMapAttr(mapped)
            guard = getattr(op, "guard", None)
            if guard is not None:
                op.properties["guard"] = AffineSetAttr(_guard(guard.data, subst, new_rank))
    region = k.regions[0]
    region.detach_block(old)
    region.add_block(block)
    old.erase()
    k.properties["domain"] = i64_array(new_sizes)
    k.properties["parallel"] = IntegerAttr(new_npar, 64)
    return True


def _guard(s: AffineSet, subst: list[AffineExpr], rank: int) -> AffineSet:
    syms = [AffineExpr.symbol(i) for i in range(s.num_symbols)]
    return AffineSet(
        rank,
        s.num_symbols,
        tuple(
            AffineConstraintExpr(
                c.kind,
                c.lhs.replace_dims_and_symbols(subst, syms),
                c.rhs.replace_dims_and_symbols(subst, syms),
            )
            for c in s.constraints
        ),
    )


@dataclass(frozen=True)
class KernelSqueezePass(ModulePass):
    """Drops the unit dims of every kernel's domain.

    `ir-opt model.tg -p kernels -t kernels` (the `kernels` pipeline runs it before
    `kernel-fuse-rows`)
    """

    name = "kernel-squeeze"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k in list(op.walk()):
            if isinstance(k, K.KernelOp):
                squeeze(k)
