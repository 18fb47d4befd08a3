"""`kernel-layout`: a contraction's result stored in the order its elementwise readers
stream it.

A dot's result is laid out as the dot computes it: a convolution's weight gradient
`patches^T @ g` as `[1, C*KH*KW, O]`, the output channels last. The optimizer reads it
as the parameter's `[O, C, KH, KW]`, so the update kernel, one pass over every weight,
strides through the gradient 2 KiB at a time (ResNet-18 b8's SGD: 31 ms a step on one
core of the developer machine; 5.8 ms with its gradients stored as below, the weight
gradients' own kernels 34 -> 39 ms). As IREE's data-layout
propagation and TVM's `transform_layout`, this pass permutes the dims of such a
temporary buffer: the dim that its readers' innermost index moves along goes last. The
contraction that writes it keeps its lanes (they run along a dim its operands are
contiguous in: `loops-interchange`) and writes each result once, after its reduction,
across the lanes (`vector.transfer_write`); the readers stream it.

A buffer is permuted when it is a `kernel.alloc` used only by kernels outside a
`kernel.rows`, written only by contractions' stores, and read only by elementwise
kernels' loads, all of whose innermost dims index the same one of its dims (not its
last). The permutation is a bijection of the buffer's elements: every access keeps its
element, results are unchanged.

```
%dw = kernel.alloc : memref<1x576x64xf32>
kernel.kernel "k5" contraction domain [576, 64, 2048] parallel 2 (%x, %g, %dw) {
  kernel.store %s, %dw[affine_map<(d0, d1) -> (0, d0, d1)>]
kernel.kernel "k9" elementwise domain [64, 64, 3, 3] parallel 4 (%m, %dw, %w) {
  %a = kernel.load %dw[affine_map<(d0, d1, d2, d3) -> (0, d1 * 9 + d2 * 3 + d3, d0)>]
// becomes
%dw = kernel.alloc : memref<1x64x576xf32>
  kernel.store %s, %dw[affine_map<(d0, d1) -> (0, d1, d0)>]
  %a = kernel.load %dw[affine_map<(d0, d1, d2, d3) -> (0, d0, d1 * 9 + d2 * 3 + d3)>]
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import AffineMapAttr, MemRefType, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from gradfuse.dialects import kernel as K
from gradfuse.dialects import kernel_host as H
from gradfuse.dialects.kernel_rows import RowsOp, access_ops

Access = tuple[K.KernelOp, K.LoadOp | K.StoreOp]


def accesses(buffer: SSAValue) -> list[Access] | None:
    """Every load and store of `buffer` with its kernel, or None where it has another
    use (a host op, a gather, a kernel in a `kernel.rows`)."""
    kernels = list(dict.fromkeys(use.operation for use in buffer.uses))
    if any(not isinstance(k, K.KernelOp) or isinstance(k.parent_op(), RowsOp) for k in kernels):
        return None
    ops = [(k, op) for k in kernels for host, op in access_ops(k) if host is buffer]
    found: list[Access] = [(k, op) for k, op in ops if isinstance(op, K.LoadOp | K.StoreOp)]
    return found if len(found) == len(ops) else None


def streamed_dim(k: K.KernelOp, load: K.LoadOp) -> int | None:
    """The one dim of the buffer that `load` moves along with `k`'s innermost index."""
    inner = len(k.domain_sizes) - 1
    dims = [j for j, e in enumerate(load.map.data.results) if inner in e.used_dims()]
    return dims[0] if len(dims) == 1 else None


def contraction_to_elementwise(found: list[Access]) -> bool:
    """Whether a buffer with accesses `found` is written only by contractions and read
    only by elementwise kernels, both at least once (a weight's gradient, read by the
    optimizer)."""
    loads = [k for k, op in found if isinstance(op, K.LoadOp)]
    stores = [k for k, op in found if isinstance(op, K.StoreOp)]
    return (
        bool(loads and stores)
        and all(k.kind.data == "contraction" for k in stores)
        and all(k.kind.data == "elementwise" for k in loads)
    )


def plan(found: list[Access], rank: int) -> list[int] | None:
    """The new order of a buffer's dims (old positions), or None to keep it."""
    if not contraction_to_elementwise(found):
        return None
    loads = [(k, op) for k, op in found if isinstance(op, K.LoadOp)]
    streamed = {streamed_dim(k, op) for k, op in loads}
    j = streamed.pop() if len(streamed) == 1 else None
    if j is None or j == rank - 1:
        return None
    return [d for d in range(rank) if d != j] + [j]


def permute_buffer(alloc: H.AllocOp, order: list[int], found: list[Access]) -> None:
    """Gives `alloc`'s buffer its dims in `order` (old positions), and every access and
    kernel argument of it the new type and index order."""
    old = alloc.result.type
    assert isinstance(old, MemRefType)
    shape = old.get_shape()
    for _, op in found:
        m = op.map.data
        op.properties["map"] = AffineMapAttr(
            AffineMap(m.num_dims, m.num_symbols, tuple(m.results[d] for d in order))
        )
    retype(alloc, MemRefType(old.element_type, [shape[d] for d in order]))


def retype(alloc: H.AllocOp, new_type: MemRefType) -> None:
    """Gives `alloc`'s buffer, and each kernel argument it is passed as, `new_type`."""
    for use in list(alloc.result.uses):
        k = use.operation
        assert isinstance(k, K.KernelOp)
        block = k.body.block
        arg = k.buffer_args[use.index]
        new_arg = block.insert_arg(new_type, arg.index)
        new_arg.name_hint = arg.name_hint
        arg.replace_all_uses_with(new_arg)
        block.erase_arg(arg)
    new_alloc = H.AllocOp.create(result_types=[new_type], properties=dict(alloc.properties))
    Rewriter.replace_op(alloc, new_alloc)  # (its name and planned offset kept)


def layout(module: Operation) -> None:
    """Permutes every temporary buffer of `module` that `plan` picks."""
    for alloc in [o for o in module.walk() if isinstance(o, H.AllocOp)]:
        found = accesses(alloc.result)
        if not found:
            continue
        order = plan(found, len(alloc.result.type.get_shape()))
        if order is not None:
            permute_buffer(alloc, order, found)


@dataclass(frozen=True)
class KernelLayoutPass(ModulePass):
    """Stores contractions' results in the order their elementwise readers stream them.

    `ir-opt model.tg -p kernels,kernel-layout -t kernels` (the `cpu` pipeline runs it)
    """

    name = "kernel-layout"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        layout(op)
