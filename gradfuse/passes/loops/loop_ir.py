"""What the loop passes and the C backend share about the loop IR: the attributes by
which the passes hand their decisions to the renderer, and the questions both ask of
index values.

`gradfuse.omp = N` on an `scf.parallel`: its N outer dims are shared among OpenMP
threads (`loops-parallelize`); `gradfuse.simd` on an `scf.parallel` (its innermost dim)
or on an `scf.for` that carries sums: the loop is vectorised (`loops-vectorize`):

    "scf.parallel"(...) ({ ... }) {gradfuse.omp = 1 : i64, gradfuse.simd}
"""

from collections.abc import Iterator

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue

KERNEL = "gradfuse.kernel"
"""Marks a kernel function and the host calls of it (`convert-kernel-to-loops`)."""
OMP = "gradfuse.omp"
SIMD = "gradfuse.simd"
REDUCING = {arith.AddfOp: "+", arith.MaximumfOp: "max"}
"""The ops by which a vectorised reduction may combine, with OpenMP's name for each."""


def is_kernel(op: Operation) -> bool:
    """Whether `op` is a kernel function or a host call of one."""
    return KERNEL in op.attributes


def int_constant(v: SSAValue) -> int | None:
    """The value of an integer `arith.constant`, else None."""
    op = v.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


def depends(v: SSAValue, target: SSAValue) -> bool:
    """Whether `v` is computed from `target` (through ops, not block arguments)."""
    if v is target:
        return True
    owner = v.owner
    return isinstance(owner, Operation) and any(depends(o, target) for o in owner.operands)


def kernel_functions(module: ModuleOp) -> Iterator[func.FuncOp]:
    """The kernel functions of `module` (what the `loops-*` passes transform)."""
    for fn in module.ops:
        if isinstance(fn, func.FuncOp) and is_kernel(fn):
            yield fn


def dim_trips(nest: scf.ParallelOp, dim: int) -> int | None:
    """The iterations of dim `dim` of `nest`, None where a bound is not a constant."""
    lo, hi, step = (int_constant(v[dim]) for v in (nest.lowerBound, nest.upperBound, nest.step))
    if lo is None or hi is None or not step:
        return None
    return -(-(hi - lo) // step)
