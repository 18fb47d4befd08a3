"""CUDA C for a lowered module's kernels, compiled by nvcc to a cubin, cached on disk.

The source comes from the one C-style renderer (`-t cuda`); the cubin is cached
by a hash of source, flags and nvcc's version, written to a temporary file and
renamed into place, so two processes compiling at once, or a crash half-way,
never leave a broken entry:

    cubin = compile_cubin(cuda_source(module), "sm_90")
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from gradfuse.backend.cstyle import CUDATarget, render_kernels
from gradfuse.backend.disk_cache import cache_dir, compile_into, tool_version, verified
from gradfuse.diagnostics import GradfuseError

FLAGS = ("-O3",)  # no --use_fast_math: its log2f (lg2.approx) is off by 2^-22 absolute near
# 1, which Adam's bias correction (`Adam._correction`) divides by; on an H200 DCGAN's first
# step then drifted 50 times further from float64 than PyTorch's float32 does


def cuda_source(module: ModuleOp) -> str:
    """The CUDA C translation unit of the module's kernels (what `ir-opt -t cuda` prints)."""
    return render_kernels(module, CUDATarget())


def nvcc() -> str:
    """The nvcc to use: $NVCC, else the one on PATH, else CUDA's default place."""
    for candidate in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    raise GradfuseError(
        "the cuda backend needs nvcc, the CUDA compiler: install the CUDA toolkit"
        " (https://developer.nvidia.com/cuda-downloads) or set NVCC to its path"
    )


def compile_cubin(source: str, arch: str = "sm_90", module: ModuleOp | None = None) -> bytes:
    """The cubin of `source` for `arch`, from the cache or freshly compiled; a failure
    names the kernel (of `module`) that nvcc stopped in."""
    compiler = nvcc()
    key = hashlib.sha256(
        "\0".join([source, arch, *FLAGS, tool_version(compiler)]).encode()
    ).hexdigest()[:32]
    target = cache_dir("cuda") / f"{key}.cubin"
    if not verified(target):  # none, or one whose checksum fails (torn, truncated, zeroed)
        command = [compiler, "-cubin", f"-arch={arch}", *FLAGS]
        compile_into(
            target, source, "kernels.cu", "nvcc",
            lambda src, out: [*command, "-o", str(out), str(src)],
            module,
        )  # fmt: skip
    return target.read_bytes()
