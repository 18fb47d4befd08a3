"""gcc for the C backend, with an on-disk cache of shared libraries.

The cache key hashes the source, the flags and gcc's version; a library is built
in a temporary directory and renamed into place, so concurrent builds and crashes
never leave a half-written entry, and its checksum is written beside it: an entry
whose bytes do not match (truncated, zeroed, foreign) is rebuilt, never loaded:

    path = build_library(source, module, split)  # split(cores): the units to build at once
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.compile_errors import compile_error
from gradfuse.backend.cstyle import CTarget
from gradfuse.backend.disk_cache import cache_dir, find_compiler, seal, tool_version, verified
from gradfuse.diagnostics import GradfuseError

TUNING = "-march=native"  # replaced by $GRADFUSE_CFLAGS (say "-march=x86-64 -mno-fma")


def flags(optimize: str) -> tuple[str, ...]:
    """gcc's flags: the `optimize` level, OpenMP, a shared library, and the machine
    tuning, which is `-march=native` unless $GRADFUSE_CFLAGS names other flags (the tests
    run once more with a portable set, so that no tolerance holds only on this CPU)."""
    tuning = os.environ.get("GRADFUSE_CFLAGS", TUNING).split()
    return (optimize, *tuning, "-fopenmp", "-shared", "-fPIC", "-w")


def compiler() -> str:
    return find_compiler("CC", "gcc", "the c backend needs a C compiler", "gcc")


def build_library(
    source: str,
    module: ModuleOp | None = None,
    split: Callable[[int], list[str]] | None = None,
    optimize: str = CTarget.optimize,
) -> Path:
    """The shared library of `source`, from the cache or built by gcc at the `optimize`
    level (big programs in several translation units, compiled at once, one per core); a
    failure names the kernel (of `module`) that gcc stopped in."""
    cc = compiler()
    cflags = flags(optimize)
    key = hashlib.sha256("\0".join([source, *cflags, tool_version(cc)]).encode()).hexdigest()
    target = cache_dir("c") / f"{key[:32]}.so"
    if verified(target):
        return target
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    units = split(cores or 1) if split is not None else [source]
    with tempfile.TemporaryDirectory(dir=cache_dir("c")) as tmp:
        out = Path(tmp) / "program.so"
        if len(units) == 1:
            jobs = [(source, Path(tmp) / "program.c", [cc, *cflags, "-o", str(out)])]
        else:
            compile_only = [f for f in cflags if f != "-shared"]
            jobs = [
                (
                    unit,
                    Path(tmp) / f"unit{k}.c",
                    [cc, *compile_only, "-c", "-o", f"{tmp}/unit{k}.o"],
                )
                for k, unit in enumerate(units)
            ]
        procs = []
        for text, src, cmd in jobs:
            src.write_text(text)
            procs.append(
                subprocess.Popen([*cmd, str(src), "-lm"], stderr=subprocess.PIPE, text=True)
            )
        for (text, src, _), proc in zip(jobs, procs):
            stderr = proc.communicate()[1]
            if proc.returncode != 0:
                kept = cache_dir("c") / f"{key[:32]}-failed.c"
                kept.write_text(text)
                raise compile_error("gcc", text, stderr.replace(str(src), str(kept)), kept, module)
        if len(units) > 1:
            objects = [f"{tmp}/unit{k}.o" for k in range(len(units))]
            done = subprocess.run(
                [cc, *cflags, "-o", str(out), *objects, "-lm"], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise GradfuseError(
                    f"gcc could not link the generated program: {done.stderr.strip()}"
                )
        os.replace(out, target)  # atomic: a reader sees no library or the whole one
    seal(target)
    return target
