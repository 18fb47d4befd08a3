"""`kernel-block-reduce`: gives the long reductions with few outputs to whole GPU blocks.

A row-by-row run with a phase that reduces at least `MIN_REDUCTION` values per output
gets `gradfuse.block_reduce`; a kernel standing alone with such a reduction (and no
tile from `kernel-tile`) is wrapped into a run of one over its outputs, so marked:

```
kernel.rows "r3" rows [8] {gradfuse.block_reduce} {
  kernel.kernel "k3" reduction domain [8, 520] parallel 1 (%y, %s) { ... }
}
```

`block_reduce` lowers such a run: each phase's threads stride over the reduction and a
tree in workgroup memory combines their partial results. Only the `cuda` pipeline runs
it (`kernels,kernel-tile,kernel-block-reduce,kernel-plan-buffers,convert-kernel-to-gpu`), after
`kernel-tile`, whose tiles it leaves alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel as K
from gradfuse.dialects.kernel_rows import row_conflict
from gradfuse.passes.kernel.tile import TILE_ATTR
from gradfuse.passes.lib.block_reduce_lowering import BLOCK_REDUCE_ATTR, cooperative


def alone_in_rows(k: K.KernelOp) -> None:
    """Wraps `k` in a run of one over its outputs, its block reducing together."""
    rows = k.domain_sizes[: k.num_parallel]
    if row_conflict([k], rows) is not None:
        return
    block = k.parent_block()
    assert block is not None
    run = K.RowsOp("r" + k.sym_name.data.lstrip("k"), rows, [])
    run.location = k.location
    run.attributes[BLOCK_REDUCE_ATTR] = UnitAttr()
    block.insert_op_before(run, k)
    k.detach()
    run.body.block.add_op(k)


@dataclass(frozen=True)
class KernelBlockReducePass(ModulePass):
    """Marks the runs, and wraps the lone kernels, whose reductions whole blocks share.

    `ir-opt model.tg -p kernels,kernel-tile,kernel-block-reduce`
    """

    name = "kernel-block-reduce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k in list(op.walk()):
            if isinstance(k, K.RowsOp):
                n = len(k.row_sizes)
                if any(cooperative(p, n) for p in k.body.block.ops if isinstance(p, K.KernelOp)):
                    k.attributes[BLOCK_REDUCE_ATTR] = UnitAttr()
            if not isinstance(k, K.KernelOp) or isinstance(k.parent_op(), K.LAUNCH_GROUPS):
                continue
            if TILE_ATTR not in k.attributes and k.num_parallel and cooperative(k, k.num_parallel):
                alone_in_rows(k)
