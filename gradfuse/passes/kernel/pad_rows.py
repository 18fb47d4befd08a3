"""`kernel-pad-rows`: a gradient buffer whose rows lie 4 KiB apart gets longer rows.

A weight gradient is written across its rows: the contraction's lanes run along the
output channels, the buffer's first dim (`[O, C, KH, KW]`, or `[1, O, C*KH*KW]` after
`kernel-layout`), so each register block stores to 16 rows at once (a transposed tile,
`loops-transpose-writes`, or a scalar a lane). An L1 data cache has 64 sets of 64-byte
lines: addresses 4 KiB apart share a set. Rows of 4096 floats (DCGAN's
`[512, 256, 4, 4]`) put all 16 lines a block writes in one set of 8 ways, and each
store misses; rows of 4608 floats (ResNet-18's `[512, 4608]`) put 8 in each of 2 sets,
which they fill. As BLAS users pad a matrix's leading dimension, this pass pads the
dim after the rows where `WAYS` of those lines share a set, by the fewest cache lines
that give the 16 rows 16 sets: `[512, 257, 4, 4]`, `[1, 512, 4624]`. Rows that share
sets by fewer (ResNet-18's `[1, 256, 2304]`: 4 sets of 4 lines; a transformer's
`[64, 128]`: 8 of 2) leave room for the operands' lines, and are kept.
Every access keeps its indices; the pad is never read or written, so the results are
bitwise the same. (Two of DCGAN b8's weight gradients, each kernel's C alone on the 2-core
Zen 3, one thread, `benchmarks/kernel_alone.py`: 9.8 -> 8.0 and 25.0 -> 22.2 ms a call.)

A buffer is padded where it is a `kernel.alloc` written only by contractions and read
only by elementwise kernels (`layout.contraction_to_elementwise`: the optimizer reads
the gradient row by row, a pad changes nothing for it):

```
%dw = kernel.alloc : memref<512x256x4x4xf32>
// becomes
%dw = kernel.alloc : memref<512x257x4x4xf32>
```
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import gcd, prod

from xdsl.context import Context
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel_host as H
from gradfuse.passes.kernel.layout import accesses, contraction_to_elementwise, retype
from gradfuse.passes.kernel.plan_buffers import element_bytes

LINE = 64
"""Bytes of a cache line."""
SETS = 64
"""Sets of an L1 data cache: 64 on x86-64 cores (32 KiB 8-way, 48 KiB 12-way)."""
WAYS = 8
"""Lines an L1 set holds: 8 on Zen 3 and 4, 12 on Intel's cores since Ice Lake."""
ROWS = 16
"""Rows a register block writes across at once: its lanes (2 vectors of 8, or 16)."""


def row_sets(stride: int, rows: int) -> list[int]:
    """The L1 set of the line each of `rows` rows `stride` bytes apart starts at."""
    return [(r * stride // LINE) % SETS for r in range(rows)]


def sets_of(stride: int, rows: int) -> int:
    """How many L1 sets the lines of `rows` rows `stride` bytes apart fall in."""
    return len(set(row_sets(stride, rows)))


def crowded(stride: int, rows: int) -> bool:
    """Whether `WAYS` or more of the lines that `rows` rows `stride` bytes apart start
    at fall in one L1 set: the block's stores alone fill it."""
    return max(Counter(row_sets(stride, rows)).values()) >= WAYS


def padded_shape(shape: list[int], itemsize: int) -> list[int]:
    """`shape` with the dim after its first dim of more than one element (the rows)
    grown, where min(rows, `ROWS`) rows are `crowded`, by the fewest steps that add
    whole cache lines to a row and put those rows in as many L1 sets; `shape` itself
    where they are not crowded, where no pad does it, or where there is no such dim."""
    rows_dim = next((d for d, n in enumerate(shape) if n > 1), len(shape))
    if rows_dim + 1 >= len(shape):
        return shape
    rows = min(shape[rows_dim], ROWS)
    if not crowded(prod(shape[rows_dim + 1 :]) * itemsize, rows):
        return shape
    unit = prod(shape[rows_dim + 2 :]) * itemsize  # bytes a step of the padded dim adds
    step = LINE // gcd(unit, LINE)  # steps that keep the rows' starts a line apart
    new = list(shape)
    for _ in range(SETS):  # (a row of 1 KiB steps moves 16 lines: no pad helps)
        if sets_of(prod(new[rows_dim + 1 :]) * itemsize, rows) == rows:
            return new
        new[rows_dim + 1] += step
    return shape


def pad_rows(module: ModuleOp) -> None:
    """Pads the rows of every gradient buffer of `module` that `padded_shape` grows."""
    for alloc in [o for o in module.walk() if isinstance(o, H.AllocOp)]:
        found = accesses(alloc.result)
        if found is None or not contraction_to_elementwise(found):
            continue
        ty = alloc.result.type
        assert isinstance(ty, MemRefType)
        shape = list(ty.get_shape())
        new = padded_shape(shape, element_bytes(ty))
        if new != shape:
            retype(alloc, MemRefType(ty.element_type, new))


@dataclass(frozen=True)
class KernelPadRowsPass(ModulePass):
    """Pads the rows of gradient buffers that would share L1 sets.

    `ir-opt model.tg -p kernels,kernel-layout,kernel-pad-rows -t kernels` (the `cpu`
    pipeline runs it)
    """

    name = "kernel-pad-rows"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pad_rows(op)
