"""`with empty_cache():` compiles in a fresh, empty GRADFUSE_CACHE_DIR (gcc and nvcc
run), restoring the caller's setting afterwards: for the cold compile times.

    with empty_cache():
        record(...); gradfuse.compile("c")    # nothing reused from earlier builds
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def empty_cache() -> Iterator[None]:
    """GRADFUSE_CACHE_DIR set to a new temporary directory for the `with` block."""
    saved = os.environ.get("GRADFUSE_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["GRADFUSE_CACHE_DIR"] = cache
        try:
            yield
        finally:
            if saved is None:
                del os.environ["GRADFUSE_CACHE_DIR"]
            else:
                os.environ["GRADFUSE_CACHE_DIR"] = saved
