"""The CUDA backend: lowered programs on an NVIDIA GPU through PyCUDA (optional extra).

`pip install -e '.[cuda]'` brings PyCUDA; without it nothing here is imported
until `backend="cuda"` is asked for, which then says what is missing.

    program = compile_cuda(lowered_module)
    result = program.run(feeders={"x": x})
"""

from __future__ import annotations

import importlib.util

from xdsl.dialects.builtin import ModuleOp

from gradfuse.diagnostics import GradfuseError


def compile_cuda(module: ModuleOp):  # noqa: ANN201  (CudaProgram, imported lazily)
    """Compiles a lowered module's kernels for the GPU of this machine."""
    if importlib.util.find_spec("pycuda") is None:
        raise GradfuseError(
            "the cuda backend needs PyCUDA: pip install -e '.[cuda]' (it needs a CUDA driver)"
        )
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count() == 0:
            raise GradfuseError("the cuda backend needs an NVIDIA GPU, and PyCUDA sees none")
    except GradfuseError:
        raise
    except Exception as err:
        raise GradfuseError(f"the cuda backend cannot start the GPU: {err}") from None
    from gradfuse.backend.cuda.runtime import CudaProgram

    return CudaProgram(module)
