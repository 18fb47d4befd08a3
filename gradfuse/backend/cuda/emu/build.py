"""The emulated device's compiler: the exact CUDA translation unit, built by g++ for the CPU.

The generated `.cu` text is written unchanged and included by a small wrapper that
adds, per kernel, an `extern "C"` entry taking the pointer arguments as an array
(`GF_KERNEL`, in `cuda_emu.h`, which g++ force-includes). The library is cached on
disk like the c backend's, keyed by source, header, mode, flags and compiler:

    lib = build_emulated(source, "fibers")   # or "threads", "tsan"
    kernels_of(source)                       # {"k0": False, "r3": True}: uses barriers

Modes (`$GRADFUSE_CUDA_EMU`): `fibers` (the default: a block's threads are fibers,
blocks on all cores), `threads` (one OS thread per CUDA thread, `std::barrier`), and
`tsan` (threads, built with `-fsanitize=thread`; the process must have libtsan loaded
first, `LD_PRELOAD=$(g++ -print-file-name=libtsan.so)`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.compile_errors import compile_error
from gradfuse.backend.disk_cache import cache_dir, find_compiler, seal, tool_version, verified
from gradfuse.diagnostics import GradfuseError

HEADER = Path(__file__).with_name("cuda_emu.h")
KERNEL = re.compile(r'^extern "C" __global__ void (\w+)\(', re.M)
MODES = {  # no -mtls-dialect=gnu2: before glibc 2.40, _dl_tlsdesc_dynamic's slow path (a
    # thread's first touch of a __shared__ array, `static thread_local`) clobbers vector
    # registers (glibc bug 31372): a partial sum in an xmm register was lost (test_cuda_emu)
    "fibers": ("-O2",),
    "threads": ("-O1", "-DGF_EMU_THREADS"),
    "tsan": ("-O1", "-g", "-DGF_EMU_THREADS", "-fsanitize=thread"),
}


def mode() -> str:
    """The emulation mode asked for by $GRADFUSE_CUDA_EMU (default `fibers`)."""
    chosen = os.environ.get("GRADFUSE_CUDA_EMU", "fibers")
    if chosen not in MODES:
        raise GradfuseError(
            f'GRADFUSE_CUDA_EMU="{chosen}" is not a mode of the emulated device (choose from'
            f" {', '.join(MODES)})"
        )
    return chosen


def compiler() -> str:
    return find_compiler("CXX", "g++", "the cuda-emu backend needs a C++20 compiler", "g++")


def kernels_of(source: str) -> dict[str, bool]:
    """Each kernel of the translation unit, and whether its body has a `__syncthreads()`."""
    heads = list(KERNEL.finditer(source))
    ends = [h.start() for h in heads[1:]] + [len(source)]
    return {h.group(1): "__syncthreads()" in source[h.end() : end] for h, end in zip(heads, ends)}


def build_emulated(source: str, kind: str, module: ModuleOp | None = None) -> Path:
    """The shared library of `source` for the emulated device in mode `kind`, from the
    cache or built now; a compiler failure names the kernel (of `module`) it is in."""
    cxx = compiler()
    flags = (*MODES[kind], "-std=c++20", "-fPIC", "-shared", "-w", "-pthread")
    header = HEADER.read_text()
    key = hashlib.sha256(
        "\0".join([source, header, *flags, tool_version(cxx)]).encode()
    ).hexdigest()[:32]
    target = cache_dir("cuda-emu") / f"{key}.so"
    if verified(target):
        return target
    # the source stays beside the library: a sanitizer's report names its lines
    kept = cache_dir("cuda-emu") / f"{key}.cu"
    entries = "".join(f"GF_KERNEL({k})\n" for k in kernels_of(source))
    with tempfile.TemporaryDirectory(dir=cache_dir("cuda-emu")) as tmp:
        main, out = Path(tmp) / "emu.cpp", Path(tmp) / "emu.so"
        (Path(tmp) / "kernels.cu").write_text(source)
        os.replace(Path(tmp) / "kernels.cu", kept)  # whole, even with another build at once
        main.write_text(f'#include "{kept}"\n{entries}')
        cmd = [cxx, *flags, "-include", str(HEADER), "-o", str(out), str(main)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise compile_error("g++", source, done.stderr, kept, module)
        os.replace(out, target)
    seal(target)
    return target
