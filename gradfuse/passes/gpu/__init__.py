"""Passes that make upstream gpu/scf/memref/arith/math IR (what `mlir-opt` reads):

| file                       | flag                    | what it does                          |
|----------------------------|-------------------------|---------------------------------------|
| `convert_kernel_to_gpu.py` | `convert-kernel-to-gpu` | kernels become `gpu.func`s, the host program plain MLIR |

    ir-opt model.tg -p default
"""
