"""Philox2x32-10, the counter-based generator behind `tg.random` (Salmon et al. 2011).

Every backend computes the same numbers: element `i` of a `tg.random` with key
`seed` at run counter `c` is `uniform(philox(i, c, seed)[0])`, the top 24 bits of
the first output word scaled into [0, 1). `uniform` is the NumPy reference,
`emit_uniform` the same computation as i64 `arith` ops inside a lowered kernel:

    >>> uniform(np.arange(3), counter=0, seed=7)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from xdsl.ir import Attribute, Operation, SSAValue

    from gradfuse.passes.lib.kernel_lowering import KernelBuilder

MULTIPLIER = 0xD256D193
WEYL = 0x9E3779B9
ROUNDS = 10
MASK = 0xFFFFFFFF


def philox(c0: np.ndarray, c1: np.ndarray | int, key: int) -> tuple[np.ndarray, np.ndarray]:
    """Both 32-bit output words for counters (c0, c1) under `key`."""
    x0 = np.asarray(c0, dtype=np.uint64) & MASK
    x1 = np.asarray(c1, dtype=np.uint64) & MASK
    k = np.uint64(key & MASK)
    for _ in range(ROUNDS):
        product = x0 * np.uint64(MULTIPLIER)
        hi, lo = product >> np.uint64(32), product & np.uint64(MASK)
        x0, x1 = (hi ^ k ^ x1) & np.uint64(MASK), lo
        k = (k + np.uint64(WEYL)) & np.uint64(MASK)
    return x0, x1


def uniform(index: np.ndarray, counter: float | int, seed: int) -> np.ndarray:
    """Uniform float32 numbers in [0, 1): one per linear element index."""
    word, _ = philox(np.asarray(index), int(counter), seed)
    return ((word >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)


def emit_uniform(
    b: KernelBuilder, linear: SSAValue, counter: SSAValue, seed: int, loc: Attribute
) -> SSAValue:
    """Philox2x32-10 at counter (linear, counter) under `seed`, as i64 arith ops
    (the 32-bit words kept in the low half), scaled into a uniform f32 in [0, 1)."""
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import f32, i64

    def op(cls: type[Operation], *args: SSAValue) -> SSAValue:
        return b.add(cls.create(operands=list(args), result_types=[i64]), loc)

    mask = b.const(MASK, i64)
    x0 = b.add(arith.IndexCastOp(linear, i64), loc)
    x0 = op(arith.AndIOp, x0, mask)
    x1 = b.add(arith.FPToSIOp(counter, i64), loc)
    x1 = op(arith.AndIOp, x1, mask)
    key = seed & MASK
    for _ in range(ROUNDS):
        product = op(arith.MuliOp, x0, b.const(MULTIPLIER, i64))
        hi = op(arith.ShRUIOp, product, b.const(32, i64))
        lo = op(arith.AndIOp, product, mask)
        x0 = op(arith.XOrIOp, op(arith.XOrIOp, hi, b.const(key, i64)), x1)
        x1 = lo
        key = (key + WEYL) & MASK
    top = op(arith.ShRUIOp, x0, b.const(8, i64))
    real = b.add(arith.SIToFPOp(top, f32), loc)
    return b.add(arith.MulfOp(real, b.const(2.0**-24, f32)), loc)
