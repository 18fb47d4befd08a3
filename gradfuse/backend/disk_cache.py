"""Where compiled code is cached on disk, and the compiler versions its keys include.

`~/.cache/gradfuse/<kind>` (or `$GRADFUSE_CACHE_DIR/<kind>`); entries are named by a
hash of what went into them, so a new compiler or flag never reuses an old entry.
Each entry has its SHA-256 beside it (`<entry>.sha256`, written after the entry): an
entry whose bytes do not match (torn by a crash or a full disk, truncated, zeroed)
is not loaded but rebuilt:

    path = cache_dir("c") / f"{sha256(source + flags + tool_version(gcc))}.so"
    if not verified(path): build(path); seal(path)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.compile_errors import compile_error
from gradfuse.diagnostics import GradfuseError


def cache_dir(kind: str) -> Path:
    """The cache folder for `kind` ("c", "cuda"), created if missing; a path that cannot
    be one (a file, no permission) is a `GradfuseError`."""
    root = Path(os.environ.get("GRADFUSE_CACHE_DIR") or Path.home() / ".cache" / "gradfuse")
    path = root / kind
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise GradfuseError(
            f"the cache directory {path} cannot be created ({reason}): set GRADFUSE_CACHE_DIR"
            " to a directory you can write"
        ) from None
    return path


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verified(path: Path) -> bool:
    """Whether the entry `path` exists and its bytes match the checksum written with it."""
    try:
        data = path.read_bytes()
        want = _checksum_path(path).read_text().strip()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == want


def _replace(path: Path, data: bytes) -> None:
    """Writes `path` as a temporary file renamed into place: a reader sees none or all."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def seal(path: Path) -> None:
    """Writes the checksum of the entry `path` beside it (atomically, as the entry)."""
    _replace(_checksum_path(path), hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")


def store(path: Path, data: bytes) -> Path:
    """Writes the entry `path` atomically and seals it; returns `path`."""
    _replace(path, data)
    seal(path)
    return path


@contextmanager
def building(path: Path, wait: bool = True) -> Iterator[bool]:
    """Holds the build lock of the entry `path` (an `flock` on `<entry>.lock`, which the
    system drops when its process dies): two processes that need one entry at once (the
    ranks of `mpirun -n 2` on one machine) build it once. Yields True once held; with
    `wait=False`, False at once where another process holds it. The holder checks
    `verified` again before building, since the lock is often held by the builder:

        with building(path) as mine:
            if not verified(path): build(path); seal(path)
    """
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def kept_failure(text: str, stderr: str, src: Path, entry: Path) -> tuple[str, Path]:
    """A compiler failed on `text`, written to `src`: its messages naming the copy of the
    text kept beside the cache `entry` it was to build (`<entry>-failed.c` for a `src`
    ending in `.c`), and that copy."""
    kept = entry.with_name(f"{entry.stem}-failed{src.suffix}")
    kept.write_text(text)
    return stderr.replace(str(src), str(kept)), kept


def compile_into(
    entry: Path,
    source: str,
    name: str,
    tool: str,
    command: Callable[[Path, Path], list[str]],
    module: ModuleOp | None = None,
) -> Path:
    """Compiles `source` into the cache entry `entry` and seals it: `command(src, out)`
    is the compiler's command line, run on `source` written to `name` in a temporary
    folder beside the entry; its output is renamed into place. A failure keeps the
    source (`kept_failure`) and raises the `compile_error` of `tool` ("gcc", "nvcc"),
    which names the kernel (of `module`) that it stopped in:

        compile_into(entry, text, "program.c", "gcc", lambda src, out: [cc, "-o", str(out), str(src)])
    """
    with tempfile.TemporaryDirectory(dir=entry.parent) as tmp:
        src, out = Path(tmp) / name, Path(tmp) / f"out{entry.suffix}"
        src.write_text(source)
        done = subprocess.run(command(src, out), capture_output=True, text=True)
        if done.returncode != 0:
            stderr, kept = kept_failure(source, done.stderr, src, entry)
            raise compile_error(tool, source, stderr, kept, module)
        os.replace(out, entry)  # atomic: a reader sees no entry or the whole one
    seal(entry)
    return entry


def find_compiler(variable: str, default: str, needs: str, package: str) -> str:
    """The path of the compiler named by $`variable` (else `default`), or one error:

    find_compiler("CC", "gcc", "the c backend needs a C compiler", "gcc")
    # GradfuseError: the c backend needs a C compiler and 'gcc' is not found:
    # apt-get install gcc
    """
    name = os.environ.get(variable, default)
    path = shutil.which(name)
    if path is None:
        raise GradfuseError(f"{needs} and '{name}' is not found: apt-get install {package}")
    return path


@cache
def tool_version(path: str) -> str:
    """What `path --version` prints (part of every cache key)."""
    return subprocess.run([path, "--version"], capture_output=True, text=True).stdout
