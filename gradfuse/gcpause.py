"""Pausing Python's cyclic garbage collector while building or rewriting IR.

IR is a web of cycles (ops <-> uses <-> blocks) that stays alive while a pass
runs; the collector would walk all of it again and again as it grows, which
makes big programs quadratic. Reference counting still frees what it can.

    with paused_gc():
        run_pipeline(module, "default")
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disables the cyclic collector inside the block (re-enabled after, if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
