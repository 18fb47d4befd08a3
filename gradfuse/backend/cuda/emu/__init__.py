"""The emulated CUDA device: gradfuse's generated CUDA, unchanged, run on the CPU.

`execute(backend="cuda-emu")`, `GRADFUSE_BACKEND=cuda-emu` or `ir-run --backend cuda-emu`
run a program through the CUDA backend's own runtime (`runtime.CudaProgram`) on this
device instead of PyCUDA's: the kernels are the `-t cuda` translation unit compiled by
g++ with `cuda_emu.h`, memory is poisoned host arrays, streams run on threads.

    program = CudaProgram(lowered_module, EmuDevice())
"""

from gradfuse.backend.cuda.emu.device import EmuDevice, EmuError

__all__ = ["EmuDevice", "EmuError"]
