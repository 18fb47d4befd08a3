"""Backends: each is a pipeline to run and a runner for its output.

| name        | pipeline  | runs                                                   |
| ----------- | --------- | ------------------------------------------------------ |
| `reference` | `tg`      | the tg interpreter on NumPy (the oracle)               |
| `numpy`     | `kernels` | fused kernels, each on whole NumPy grids               |
| `lowered`   | `default` | the lowered gpu/scf IR, thread by thread (small only)  |
| `c`         | `cpu`     | generated C, compiled by gcc (the default without GPU) |
| `cuda`      | `cuda`    | generated CUDA, compiled by nvcc, launched by PyCUDA   |
| `cuda-emu`  | `cuda`    | the same CUDA on the CPU: g++ and an emulated device   |

    program = compile_module(module, "c")
    result = program.run(feeders={"x": x}, params={"w": w})
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute

from gradfuse.diagnostics import GradfuseError, Position, position_of
from gradfuse.gcpause import paused_gc

PIPELINE_OF = {
    "reference": "tg",
    "numpy": "kernels",
    "lowered": "default",
    "c": "cpu",
    "cuda": "cuda",
    "cuda-emu": "cuda",
}


C_PIPELINES = ("cpu",)
"""What the c backend may compile with: `cpu` (loop nests from `convert-kernel-to-loops`
and the `loops-*` passes), with or without options (`cpu{jam-work=0}`)."""


def pipeline_of(backend: str) -> str:
    """The pipeline `backend` compiles with; for c, $GRADFUSE_C_PIPELINE when it is set
    (the `cpu` pipeline with options: `GRADFUSE_C_PIPELINE='cpu{jam-work=0}'`), with the
    vector width measured for this machine unless it sets one (`cpu{lanes=16}`, see
    `gradfuse.backend.c.lanes`)."""
    if backend != "c":
        return PIPELINE_OF[backend]
    from gradfuse.backend.c.lanes import c_pipeline

    chosen = os.environ.get("GRADFUSE_C_PIPELINE")
    if not chosen:
        return c_pipeline(PIPELINE_OF[backend])
    if chosen.partition("{")[0] not in C_PIPELINES:
        raise GradfuseError(
            f'GRADFUSE_C_PIPELINE="{chosen}" is not a pipeline of the c backend'
            f" (choose from {', '.join(C_PIPELINES)})"
        )
    from gradfuse.passes import pipeline

    try:
        pipeline(chosen)
    except (ValueError, GradfuseError) as e:
        why = e.message if isinstance(e, GradfuseError) else e
        raise GradfuseError(f'GRADFUSE_C_PIPELINE="{chosen}": {why}') from None
    return c_pipeline(chosen)


@dataclass(frozen=True)
class Signature:
    """A source function's argument types and position, kept from before the pipeline."""

    name: str
    inputs: tuple[Attribute, ...]
    position: Position | None


def signatures(module: ModuleOp) -> dict[str, Signature]:
    """The signature of every function of `module`, by name."""
    return {
        f.sym_name.data: Signature(
            f.sym_name.data, tuple(f.function_type.inputs.data), position_of(f.location)
        )
        for f in module.ops
        if isinstance(f, func.FuncOp)
    }


def check_args(sig: Signature, args: Any) -> None:
    """Arguments as the entry function takes them, on every backend: one array of
    numbers per argument, of the argument's shape (the backends cast the element type,
    as the reference does). Raises one located sentence otherwise:

        main.tg:1:1: error: @main takes 2 argument(s) (tensor<2x3xf32>, tensor<3xf32>), 1 given
    """
    args = list(args)
    if len(args) != len(sig.inputs):
        types = ", ".join(str(t) for t in sig.inputs)
        raise GradfuseError(
            f"@{sig.name} takes {len(sig.inputs)} argument(s) ({types}), {len(args)} given",
            sig.position,
        )
    for i, (arg, ty) in enumerate(zip(args, sig.inputs)):
        arr = np.asarray(arg)
        if not isinstance(ty, TensorType):
            continue
        want = tuple(ty.get_shape())
        if arr.shape != want or arr.dtype.kind not in "biuf":
            raise GradfuseError(
                f"argument {i} of @{sig.name} must be an array of numbers of shape {want}"
                f" ({ty}), got {arr.dtype} data of shape {arr.shape}",
                sig.position,
            )


@dataclass
class Program:
    """A module compiled for one backend; `run` may be called many times."""

    backend: str
    module: ModuleOp
    runner: Callable[..., Any]
    param_keys: frozenset[str] | None = None  # the source's params (not the pipeline's)
    entries: dict[str, Signature] | None = None  # the source's functions

    def run(self, **kwargs: Any) -> Any:
        """Runs the program: `args`, `feeders`, `receivers`, `params` as `interpreters.tg.run`.

        The arguments are checked first, the same way on every backend (`check_args`).
        The result's params are those of the source program, as the reference gives
        them: state that the pipeline made (loop-carried tensors) is left out.

        Python's cyclic garbage collector is paused while the program runs
        (`paused_gc`), as while passes run: a training loop runs inside one call, and
        a full collection there would walk all the IR that is alive (ResNet-18's,
        750,000 objects: one collection took 0.79 s, in a run of 60 steps of 183 ms).
        Reference counting still frees what feeders and receivers drop; cycles they
        leave behind are collected after the run."""
        if self.entries:
            entry = kwargs.get("entry", "main")
            only = list(self.entries.values())
            sig = self.entries.get(entry, only[0] if len(only) == 1 else None)
            if sig is not None:
                check_args(sig, kwargs.get("args", ()))
        with paused_gc():
            result = self.runner(self.module, **kwargs)
        if self.param_keys is not None:
            result.params = {k: v for k, v in result.params.items() if k in self.param_keys}
        return result


def cuda_available() -> bool:
    """Whether PyCUDA is installed and sees a GPU (never imports it otherwise)."""
    if importlib.util.find_spec("pycuda") is None:
        return False
    try:
        import pycuda.driver as drv  # type: ignore[import-not-found]

        drv.init()
        return drv.Device.count() > 0
    except Exception:
        return False


def c_available() -> bool:
    """Whether the C backend can run here (its package and a C compiler)."""
    return importlib.util.find_spec("gradfuse.backend.c") is not None and bool(
        shutil.which(os.environ.get("CC", "gcc"))
    )


def choose_backend(name: str | None = None) -> str:
    """`name`, else $GRADFUSE_BACKEND, else cuda when PyCUDA sees a GPU, else c (numpy
    when there is no C compiler either)."""
    default = "cuda" if cuda_available() else "c" if c_available() else "numpy"
    chosen = name or os.environ.get("GRADFUSE_BACKEND") or default
    if chosen not in PIPELINE_OF:
        raise GradfuseError(f'unknown backend "{chosen}" (choose from {", ".join(PIPELINE_OF)})')
    return chosen


_RUNNERS = {
    "reference": "interpreters.tg:run",
    "numpy": "interpreters.kernel:run_kernels",
    "lowered": "interpreters.lowered:run_lowered",
    "c": "c:compile_c",
    "cuda": "cuda:compile_cuda",
    "cuda-emu": "cuda:compile_cuda_emu",
}
"""Per backend, below `gradfuse.backend`: its interpreter, or its compiler (c, cuda)."""


def _runner(backend: str, module: ModuleOp, tail: str = "") -> Callable[..., Any]:
    """The `Program.runner` of `module` on `backend`, imported when used; c is also given
    the pipeline's `tail` to run (`kernel_tail`)."""
    path, name = _RUNNERS[backend].split(":")
    found = getattr(importlib.import_module(f"gradfuse.backend.{path}"), name)
    if backend == "c":
        return bound_run(found(module, tail=tail).run)
    return bound_run(found(module).run) if backend in ("cuda", "cuda-emu") else found


def bound_run(run: Callable[..., Any]) -> Callable[..., Any]:
    """A compiled program's `run` as a `Program.runner` (which is also given the module)."""
    return lambda module, **kwargs: run(**kwargs)


def compile_module(
    module: ModuleOp, backend: str | None = None, pipeline: str | None = None
) -> Program:
    """Runs the backend's pipeline on `module` (in place) and prepares it to run."""
    from gradfuse.dialects import tg
    from gradfuse.passes import kernel_tail, run_pipeline

    name = choose_backend(backend)
    spec = pipeline_of(name) if pipeline is None else pipeline
    has_tg = any(op.dialect_name() == "tg" for op in module.walk())
    keys = frozenset(op.key.data for op in module.walk() if isinstance(op, tg.ParamOp))
    entries = signatures(module)
    tail = ""
    if spec and name == "c":  # the loop passes kernel by kernel while gcc compiles
        spec, tail = kernel_tail(spec)
    if spec:
        run_pipeline(module, spec)
    elif name in ("lowered", "c", "cuda", "cuda-emu") and has_tg:
        raise GradfuseError(
            f"the {name} backend runs lowered IR and this program has tg ops: run the"
            f" {PIPELINE_OF[name]} pipeline first (no --pipeline none), or choose"
            " --backend reference"
        )
    return Program(name, module, _runner(name, module, tail), keys if has_tg else None, entries)
