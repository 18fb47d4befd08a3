"""The CUDA backend: lowered programs on an NVIDIA GPU through PyCUDA (optional extra), or
the same CUDA on the emulated device (`cuda-emu`, no GPU and no PyCUDA needed).

`pip install -e '.[cuda]'` brings PyCUDA; without it nothing here is imported
until `backend="cuda"` is asked for, which then says what is missing.

    program = compile_cuda(lowered_module)        # a GPU
    program = compile_cuda_emu(lowered_module)    # this CPU, the same CUDA text
    result = program.run(feeders={"x": x})
"""

from __future__ import annotations

import importlib.util

from xdsl.dialects.builtin import ModuleOp

from gradfuse.diagnostics import GradfuseError

NO_GPU = '; backend="cuda-emu" runs the same CUDA on this CPU'


def compile_cuda(module: ModuleOp):  # noqa: ANN201  (CudaProgram, imported lazily)
    """Compiles a lowered module's kernels for the GPU of this machine."""
    if importlib.util.find_spec("pycuda") is None:
        raise GradfuseError(
            "the cuda backend needs PyCUDA: pip install -e '.[cuda]' (it needs a CUDA driver)"
            + NO_GPU
        )
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count() == 0:
            raise GradfuseError(
                "the cuda backend needs an NVIDIA GPU, and PyCUDA sees none" + NO_GPU
            )
    except GradfuseError:
        raise
    except Exception as err:
        raise GradfuseError(f"the cuda backend cannot start the GPU: {err}{NO_GPU}") from None
    from gradfuse.backend.cuda.device import PyCudaDevice
    from gradfuse.backend.cuda.runtime import CudaProgram

    return CudaProgram(module, PyCudaDevice())


def compile_cuda_emu(module: ModuleOp):  # noqa: ANN201
    """Compiles a lowered module's CUDA for the emulated device (`cuda.emu`)."""
    from gradfuse.backend.cuda.emu import EmuDevice
    from gradfuse.backend.cuda.runtime import CudaProgram

    return CudaProgram(module, EmuDevice())
