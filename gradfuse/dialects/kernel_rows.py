"""`kernel.rows`: kernels run one after another for each row (vertical fusion by rows).

A row is a point of the leading `rows` dims that every kernel inside shares. The
kernels run in order for each row, rows independently, as one launch: on a GPU one
block per row, a barrier between kernels; on a CPU a loop over rows. That is legal
when every buffer a kernel inside writes is accessed, by every kernel inside, only
at its own row: the row dims `d0, ..., d(n-1)` index the same buffer axes in every
access (`row_axes`). A softmax (max, sum,
normalise), a LayerNorm forward, or a transformer's chain of row-wise contractions
then is one launch instead of one per reduction:

```
"kernel.rows"() <{sym_name = "r3", rows = array<i64: 2, 16>}> ({
  kernel.kernel "k8" reduction domain [2, 16, 64] parallel 2 (%x, %mean) { ... }
  kernel.kernel "k9" elementwise domain [2, 16, 64] parallel 3 (%x, %mean, %y) { ... }
}) : () -> ()
```

`row_conflict` is the legality check that `kernel-fuse-rows` uses to form these ops
and the verifier repeats.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from xdsl.dialects.builtin import DenseArrayBase, MemRefType, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def, region_def, traits_def
from xdsl.traits import MemoryWriteEffect, NoTerminator

from gradfuse import affine
from gradfuse.dialects.tg_base import fail, i64_array, ints

_READS = ("kernel.load", "kernel.gather")
_WRITES = ("kernel.store", "kernel.scatter_add")


def access_ops(k: IRDLOperation) -> Iterator[tuple[SSAValue, Operation]]:
    """(host buffer, op) for each load, gather, store and scatter_add of kernel `k`."""
    assert k.name == "kernel.kernel"
    host = dict(zip(k.buffer_args, k.buffers))  # type: ignore[attr-defined]
    for op in k.body.block.ops:  # type: ignore[attr-defined]
        if op.name in _READS or op.name in _WRITES:
            yield host[op.buffer], op  # type: ignore[attr-defined]


def accesses(k: IRDLOperation) -> Iterator[tuple[SSAValue, AffineMap, bool]]:
    """(host buffer, access map, whether it writes) for each access of kernel `k`."""
    for b, op in access_ops(k):
        yield b, op.map.data, op.name in _WRITES  # type: ignore[attr-defined]


RowAxes = tuple[tuple[int, int], ...]
"""Per row dim, the buffer axis it indexes and the block of elements a row has there."""


def row_axes(
    access: AffineMap, buffer: SSAValue, rows: Sequence[int], sizes: Sequence[int]
) -> RowAxes | None:
    """The buffer axes that an access indexes by the row dims `d0, ..., d(n-1)` (of the
    rows' sizes), each with the block of elements one row has along it, or None where
    some row dim indexes no axis by itself. Accesses to one buffer with the same row
    axes touch, at row r, only the elements of row r: `(d0, d1) -> (d1, d0)` into a
    `128x512` buffer over rows [512] gives ((1, 1),). A flat axis holding rows of c
    elements counts too (`sizes`: the accessing kernel's domain):
    `(d0, d1) -> (14 * d0 + d1)` into `896` over rows [64], sizes (64, 14), gives
    ((0, 14),)."""
    ty = buffer.type
    assert isinstance(ty, MemRefType)
    shape = ty.get_shape()
    axes = []
    for i, size in enumerate(rows):
        found = [
            (a, 1)
            for a, e in enumerate(access.results)
            if isinstance(e, AffineDimExpr) and e.position == i and shape[a] == size
        ]
        if not found:
            blocks = [
                (a, affine.row_block(e, i, len(rows), sizes[: access.num_dims]))
                for a, e in enumerate(access.results)
            ]
            found = [(a, c) for a, c in blocks if c is not None and shape[a] == size * c]
        if len(found) != 1:
            return None
        axes.append(found[0])
    return tuple(axes)


def row_conflict(kernels: Sequence[IRDLOperation], rows: Sequence[int]) -> str | None:
    """Why `kernels` cannot run row by row over `rows`, or None when they can: every
    buffer that one of them writes is accessed by all of them through the same row axes
    (`row_axes`)."""
    n = len(rows)
    written: set[SSAValue] = set()
    for k in kernels:
        if k.name != "kernel.kernel":  # (kernel.py imports this module: ops by name)
            return f"may only hold kernel.kernel ops, found {k.name}"
        if k.domain_sizes[:n] != tuple(rows) or k.num_parallel < n:
            return (
                f"kernel {k.sym_name.data} with domain {list(k.domain_sizes)} and"
                f" {k.num_parallel} parallel dims does not run over rows {list(rows)}"
            )
        written.update(b for b, _, w in accesses(k) if w)
    seen: dict[SSAValue, RowAxes] = {}
    for k in kernels:
        for b, access, _ in accesses(k):
            if b not in written:
                continue
            axes = row_axes(access, b, rows, k.domain_sizes)
            if axes is None or seen.setdefault(b, axes) != axes:
                return (
                    f"kernel {k.sym_name.data} reads or writes a buffer that the kernels"
                    f" write at {access}, outside its own row"
                )
    return None


class RowAlignment:
    """`row_conflict` kept up to date while kernels join a run over `rows`: the row axes
    of every access to each buffer, and the buffers written. Adding kernels looks at
    their own accesses only, so a run of n kernels costs O(n), not O(n^2)."""

    def __init__(self, rows: Sequence[int]):
        self.rows = tuple(rows)
        self.axes: dict[SSAValue, set[RowAxes | None]] = {}
        self.written: set[SSAValue] = set()

    def add(self, kernels: Sequence[IRDLOperation]) -> bool:
        """Adds `kernels` (each running over `rows`); whether every written buffer is
        still accessed through one and the same row axes (`row_conflict` is None)."""
        touched: set[SSAValue] = set()
        for k in kernels:
            for b, access, writes in accesses(k):
                axes = row_axes(access, b, self.rows, k.domain_sizes)  # type: ignore[attr-defined]
                self.axes.setdefault(b, set()).add(axes)
                if writes:
                    self.written.add(b)
                touched.add(b)
        return all(
            b not in self.written or (len(self.axes[b]) == 1 and None not in self.axes[b])
            for b in touched
        )


@irdl_op_definition
class RowsOp(IRDLOperation):
    """Kernels run in order for each row of `rows`, rows independently, as one launch.

    `"kernel.rows"() <{sym_name = "r3", rows = array<i64: 32>}> ({ kernel.kernel ... })`
    """

    name = "kernel.rows"
    sym_name = prop_def(StringAttr)
    rows = prop_def(DenseArrayBase)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), MemoryWriteEffect())

    def __init__(self, name: str, rows: Sequence[int], kernels: Sequence[IRDLOperation]):
        super().__init__(
            regions=[Region(Block(kernels))],
            properties={"sym_name": StringAttr(name), "rows": i64_array(rows)},
        )

    @property
    def row_sizes(self) -> tuple[int, ...]:
        return ints(self.rows)

    def verify_(self) -> None:
        if not self.row_sizes or any(r < 1 for r in self.row_sizes):
            raise fail(self, f"bad rows {list(self.row_sizes)}")
        why = row_conflict(list(self.body.block.ops), self.row_sizes)
        if why is not None:
            raise fail(self, why)
