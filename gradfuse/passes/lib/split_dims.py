"""Splitting a kernel's first dim in two, for `kernel-fuse-rows`.

A linear layer on [B, T, C] runs over rows [B*T] (`linear` flattens its input so that
the bias is the contraction's epilogue), and a conv1d's im2col dot over [N*L]; their
accesses read the flat index back as `d0 floordiv T` and `d0 mod T`. Such a kernel
cannot join a run over [B] until its first dim is [B, T] again:

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

from math import prod
from typing import cast

from xdsl.dialects.builtin import AffineMapAttr, AffineSetAttr, IndexType, IntegerAttr
from xdsl.ir import Block
from xdsl.ir.affine import AffineExpr

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.dialects.tg_base import i64_array
from gradfuse.passes.kernel.squeeze import ACCESS, _guard


def split_first(k: K.KernelOp, lead: tuple[int, ...]) -> K.KernelOp | None:
    """A copy of `k` whose first parallel dim is split into `lead` (their product is its
    size), or None when the body uses that dim's index other than in an access map."""
    sizes, npar = k.domain_sizes, k.num_parallel
    if npar < 1 or prod(lead) != sizes[0] or len(lead) < 2:
        return None
    if k.body.block.args[0].uses:
        return None  # (a compare on d0: it would need the index computed from the new dims)
    new = cast(K.KernelOp, k.clone())  # (erase it if unused: it uses the buffers)
    old = new.body.block
    extra = len(lead) - 1
    new_sizes = (*lead, *sizes[1:])
    flat = affine.dims(len(lead))
    strides = affine.strides_of(lead)
    first = flat[0] * strides[0]
    for d, s in zip(flat[1:], strides[1:]):
        first = first + d * s
    ops = list(old.ops)
    reduces = [i for i, op in enumerate(ops) if isinstance(op, K.ReduceOp)]
    split = reduces[-1] + 1 if reduces else 0
    block = Block(arg_types=[IndexType()] * len(new_sizes) + [a.type for a in k.buffer_args])
    for arg, to in zip(old.args[1:], block.args[len(lead) :]):
        arg.replace_all_uses_with(to)
    for n, op in enumerate(ops):
        op.detach()
        block.add_op(op)
        if not isinstance(op, ACCESS):
            continue
        rank = npar if n >= split else len(sizes)
        subst = [first, *(AffineExpr.dimension(i + extra) for i in range(1, rank))]
        m = op.map.data
        syms = [AffineExpr.symbol(s) for s in range(m.num_symbols)]
        mapped = m.replace_dims_and_symbols(subst, syms, rank + extra, m.num_symbols)
        if not m.num_symbols:
            mapped = affine.simplify(mapped, new_sizes[: rank + extra])
        op.properties["map"] = AffineMapAttr(mapped)
        guard = getattr(op, "guard", None)
        if guard is not None:
            g = _guard(guard.data, subst, rank + extra)
            op.properties["guard"] = AffineSetAttr(g)
    region = new.regions[0]
    region.detach_block(old)
    region.add_block(block)
    old.erase()
    new.properties["domain"] = i64_array(new_sizes)
    new.properties["parallel"] = IntegerAttr(npar + extra, 64)
    return new
