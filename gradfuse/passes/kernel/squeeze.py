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
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir.affine import AffineExpr
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel as K
from gradfuse.passes.lib.kernel_domain import redomain


def _kept(sizes: tuple[int, ...], npar: int) -> list[int]:
    keep = [i for i, s in enumerate(sizes) if s != 1]
    if npar < len(sizes) and not any(i >= npar for i in keep):
        keep.append(len(sizes) - 1)  # a reduction keeps a reduction dim
    return keep or [0]


def _substitution(keep: list[int], rank: int) -> list[AffineExpr]:
    """Old dim i -> its new dim, or 0 when dropped."""
    return [
        AffineExpr.dimension(keep.index(i)) if i in keep else AffineExpr.constant(0)
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
    redomain(k, new_sizes, sum(i < npar for i in keep), _substitution(keep, len(sizes)))
    return True


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
