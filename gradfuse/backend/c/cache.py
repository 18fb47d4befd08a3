"""gcc for the C backend, with an on-disk cache of shared libraries.

The cache key hashes the source, the flags and gcc's version; a library is built
in a temporary directory and renamed into place, so concurrent builds and crashes
never leave a half-written entry, and an entry that is not an ELF file is rebuilt:

    path = build_library(source, main_fn)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.compile_errors import compile_error
from gradfuse.backend.disk_cache import cache_dir, tool_version
from gradfuse.diagnostics import GradfuseError

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-w")


def compiler() -> str:
    cc = os.environ.get("CC", "gcc")
    path = shutil.which(cc)
    if path is None:
        raise GradfuseError(
            f"the c backend needs a C compiler and '{cc}' is not found: apt-get install gcc"
        )
    return path


def build_library(source: str, module: ModuleOp | None = None) -> Path:
    """The shared library of `source`, from the cache or built by gcc; a failure names
    the kernel (of `module`) that gcc stopped in."""
    cc = compiler()
    key = hashlib.sha256("\0".join([source, *FLAGS, tool_version(cc)]).encode()).hexdigest()
    target = cache_dir("c") / f"{key[:32]}.so"
    if target.exists():
        with target.open("rb") as f:
            if f.read(4) == b"\x7fELF":  # anything else (a torn or foreign file) is rebuilt
                return target
    with tempfile.TemporaryDirectory(dir=cache_dir("c")) as tmp:
        src = Path(tmp) / "program.c"
        src.write_text(source)
        out = Path(tmp) / "program.so"
        done = subprocess.run(
            [cc, *FLAGS, "-o", str(out), str(src), "-lm"], capture_output=True, text=True
        )
        if done.returncode != 0:
            kept = cache_dir("c") / f"{key[:32]}-failed.c"
            kept.write_text(source)
            raise compile_error(
                "gcc", source, done.stderr.replace(str(src), str(kept)), kept, module
            )
        os.replace(out, target)  # atomic: a reader sees no library or the whole one
    return target
