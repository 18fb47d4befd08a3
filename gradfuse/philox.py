"""Philox2x32-10, the counter-based generator behind `tg.random` (Salmon et al. 2011).

Every backend computes the same numbers: element `i` of a `tg.random` with key
`seed` at run counter `c` is `uniform(philox(i, c, seed)[0])`, the top 24 bits of
the first output word scaled into [0, 1):

    >>> uniform(np.arange(3), counter=0, seed=7)
"""

from __future__ import annotations

import numpy as np

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
