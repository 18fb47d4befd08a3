"""The attributes by which the loop passes hand their decisions to the C renderer.

`gradfuse.omp = N` on an `scf.parallel`: its N outer dims are shared among OpenMP
threads (`loops-parallelize`); `gradfuse.simd` on an `scf.parallel` (its innermost dim)
or on an `scf.for` that carries sums: the loop is vectorised (`loops-vectorize`):

    "scf.parallel"(...) ({ ... }) {gradfuse.omp = 1 : i64, gradfuse.simd}
"""

from xdsl.ir import Operation

KERNEL = "gradfuse.kernel"
"""Marks a kernel function and the host calls of it (`convert-kernel-to-loops`)."""
OMP = "gradfuse.omp"
SIMD = "gradfuse.simd"


def is_kernel(op: Operation) -> bool:
    """Whether `op` is a kernel function or a host call of one."""
    return KERNEL in op.attributes
