"""Where compiled code is cached on disk, and the compiler versions its keys include.

`~/.cache/gradfuse/<kind>` (or `$GRADFUSE_CACHE_DIR/<kind>`); entries are named by a
hash of what went into them, so a new compiler or flag never reuses an old entry:

    cache_dir("c") / f"{sha256(source + flags + tool_version(gcc))}.so"
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """The cache folder for `kind` ("c", "cuda"), created if missing."""
    root = Path(os.environ.get("GRADFUSE_CACHE_DIR") or Path.home() / ".cache" / "gradfuse")
    path = root / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


@cache
def tool_version(path: str) -> str:
    """What `path --version` prints (part of every cache key)."""
    return subprocess.run([path, "--version"], capture_output=True, text=True).stdout
