"""Row-private scalars: a [1] kernel after a run of row kernels joins the run, with the
scalars it writes kept once per row.

A recurrence's step counter `t` is a [1] buffer that every row of the time step's
`kernel.rows` reads (the slot of its stacks, the step of its input) and that a [1]
kernel then increments: a launch of its own per time step, since no row may write what
the other rows read. Kept once per row (`[R]` copies, all equal between launches), each
row reads its own copy and increments it last, so the step is one launch:

```
r14 over rows [20]: k14 ... %s = kernel.load %t[(d0, d1) -> (0)] ...   // t: memref<1xf32>
k24 elementwise [1]: kernel.store (load %t[(d0) -> (0)] + 1.0), %t[(d0) -> (d0)]
// becomes, t: memref<20xf32>
r14 over rows [20]: k14 ... %s = kernel.load %t[(d0, d1) -> (d0)] ...
                    k24 elementwise [20]: kernel.store (load %t[(d0) -> (d0)] + 1.0), ...
```

The kernels elsewhere that write `t` (its fill before the loop) write all R copies;
those that only read it read copy 0, as before. Each `t` must be a `kernel.param` (a
loop-carried value) that only kernels use.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import AffineMapAttr, MemRefType
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineMap
from xdsl.rewriter import Rewriter

from gradfuse.dialects import kernel as K
from gradfuse.dialects.kernel_host import ParamOp
from gradfuse.dialects.kernel_rows import RowsOp, access_ops
from gradfuse.dialects.tg_base import i64_array


def _scalar(b: SSAValue) -> bool:
    return isinstance(b.type, MemRefType) and tuple(b.type.get_shape()) == (1,)


def scalar_kernel(k: K.KernelOp) -> bool:
    """Whether `k` is an elementwise kernel of one point that loads and stores only [1]
    buffers (what `privatize` may run once per row)."""
    return (
        k.kind.data == "elementwise"
        and k.domain_sizes == (1,)
        and not any(isinstance(op, K.RandomOp) for op in k.body.block.ops)
        and all(isinstance(op, K.LoadOp | K.StoreOp) and _scalar(b) for b, op in access_ops(k))
    )


def _writes(k: K.KernelOp, b: SSAValue) -> bool:
    return any(buf is b and not isinstance(op, K.LoadOp) for buf, op in access_ops(k))


def _plan(
    members: Sequence[K.KernelOp], k: K.KernelOp
) -> tuple[set[SSAValue], list[K.KernelOp]] | None:
    """The buffers to keep per row and the other kernels that write them (their fills),
    or None where `k` may not join the run of `members` so."""
    if not scalar_kernel(k):
        return None
    own = {b for b, op in access_ops(k) if isinstance(op, K.StoreOp)}
    if not own or not all(isinstance(b.owner, ParamOp) for b in own):
        return None
    inside, fills = set(members), []
    for b in own:
        for use in b.uses:
            user = use.operation
            if user is k:
                continue
            if not isinstance(user, K.KernelOp):
                return None  # a host op (a feed, a callback) sees the buffer whole
            if user in inside:
                loads = [op for buf, op in access_ops(user) if buf is b]
                if any(not isinstance(op, K.LoadOp) or op.guard is not None for op in loads):
                    return None
            elif _writes(user, b):
                stores = {buf for buf, op in access_ops(user) if isinstance(op, K.StoreOp)}
                if not scalar_kernel(user) or not stores <= own:
                    return None
                if isinstance(user.parent_op(), RowsOp):
                    return None  # (a fill in a run over [1] would no longer fit it)
                fills.append(user)
    return own, fills


def _retype(b: SSAValue, rows: int) -> None:
    """Gives buffer `b` (and the kernel arguments bound to it) `rows` elements."""
    assert isinstance(b.type, MemRefType)
    ty = MemRefType(b.type.element_type, [rows])
    for use in list(b.uses):
        user = use.operation
        if isinstance(user, K.KernelOp):
            Rewriter.replace_value_with_new_type(user.buffer_args[use.index], ty)
    Rewriter.replace_value_with_new_type(b, ty)


def _remap(k: K.KernelOp, own: set[SSAValue], rows: int | None) -> None:
    """Accesses of `own` read the row's copy (d0); with `rows`, `k` (a kernel of one
    point) runs over them, its other accesses kept at their one element (d0 = 0)."""
    if rows is not None:
        k.domain = i64_array([rows])
    for b, op in access_ops(k):
        old = op.map.data
        if b in own:
            new = AffineMap(old.num_dims, old.num_symbols, (AffineDimExpr(0),))
        elif rows is not None:
            zero = [AffineConstantExpr(0)] + [AffineDimExpr(i) for i in range(1, old.num_dims)]
            new = old.replace_dims_and_symbols(zero, [], old.num_dims, old.num_symbols)
        else:
            continue
        op.map = AffineMapAttr(new)


def privatize(
    members: Sequence[K.KernelOp], rows: tuple[int, ...], ks: Sequence[K.KernelOp]
) -> bool:
    """Rewrites the kernels `ks` of one point (independent of one another: a group's),
    after a run of `members` over `rows` (one dim), to run over the rows with the buffers
    they write kept once per row (see the module docstring); whether it did (all of them
    or none), after which they may join the run."""
    if len(rows) != 1:
        return False
    plans = [_plan(members, k) for k in ks]
    if not ks or any(p is None for p in plans):
        return False
    for k, plan in zip(ks, plans):
        assert plan is not None
        own, fills = plan
        for m in members:
            _remap(m, own, None)
        for w in (k, *fills):
            _remap(w, own, rows[0])
        for b in own:  # last: the new buffers are new values
            _retype(b, rows[0])
    return True
