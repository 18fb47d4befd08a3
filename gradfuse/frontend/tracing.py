"""The recording API: loops, host input/output, and running the recorded program.

ir_for(range(0, 1000), step)                       # step traced once into a tg.for
x = Feeder(lambda: batch(), shape=[2, 255])        # tg.feeder "feeder"
Receiver(save, opt.parameters, name="params")      # tg.receiver "params", ...
execute()                                          # compile, run, write params back
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from xdsl.ir import Block

from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import (
    emit,
    error,
    insert_into,
    insertion_block,
    manual_seed,
    new_program,
    program,
)
from gradfuse.frontend.tensor import Tensor, element_for

BACKENDS = ("reference",)
"""The backends `execute()` can run on now."""


def reset() -> None:
    """Discards the recorded program and starts a new one. `gradfuse.reset()`"""
    new_program()


def ir_text(print_locations: bool = False, after: str | None = None) -> str:
    """The recorded program as `.tg` text (what `ir-opt` reads); with `after`, the text
    after that pipeline or pass spec ran on a copy (`after="tg"`: differentiated and
    decomposed). `print(gradfuse.ir_text())`
    """
    from gradfuse.frontend.printer import print_tg

    module = program().module
    if after is not None:
        from gradfuse.passes import run_pipeline

        module = module.clone()
        run_pipeline(module, after)
    return print_tg(module, print_locations)


def print_graph(print_locations: bool = False, after: str | None = None) -> None:
    """Prints the recorded program as `.tg` text (see `ir_text`). `print_graph()`"""
    print(ir_text(print_locations, after), end="")


def _forget_block(block: Block) -> None:
    """Drops the cached param values of `block` (they are stale after a loop ran)."""
    prog = program()
    for key in [k for k in prog.current if k[0] == id(block)]:
        del prog.current[key]


def ir_for(loop: range, fn: Callable[[], Any]) -> None:
    """Traces `fn()` once into the body of a `tg.for` over `loop`; it runs every iteration.

    `ir_for(range(0, 1000), step)` records `tg.for %i = 0 to 1000 step 1 { ... }`.
    """
    if not isinstance(loop, range):
        raise error(f"ir_for: expected a range, got {type(loop).__name__}")
    op = tg.ForOp(loop.start, loop.stop, loop.step, [])
    body = op.body.block
    body.add_op(tg.YieldOp())
    outer = insertion_block()
    emit(op)
    try:
        with insert_into(body):
            fn()
    except BaseException:
        _forget_block(body)
        op.detach()
        op.erase(safe_erase=False)
        raise
    _forget_block(body)
    _forget_block(outer)


def _unique(prefix: str, taken: dict[str, Any]) -> str:
    return program().unique_key(prefix, lambda k: k in taken)


def Feeder(  # noqa: N802 (the seed program's name)
    fn: Callable[[], np.ndarray] | np.ndarray,
    shape: Sequence[int],
    dtype: Any = np.float32,
    name: str | None = None,
) -> Tensor:
    """Host -> device input: `fn()` is called each time the program reaches the feeder.

    `x = Feeder(lambda: np.full((2, 255), 0.2, np.float32), shape=[2, 255])` records
    `%x = tg.feeder "feeder" : tensor<2x255xf32>`.
    """
    prog = program()
    key = _unique(name or "feeder", prog.feeders)
    op = emit(tg.FeederOp(key, tensor([int(d) for d in shape], element_for(dtype))))
    prog.feeders[key] = fn  # type: ignore[assignment]
    return Tensor(op.result)


def _values(tensors: object) -> list[Tensor]:
    if callable(tensors) and not isinstance(tensors, Tensor):
        tensors = tensors()
    if isinstance(tensors, Tensor):
        return [tensors]
    if isinstance(tensors, dict):
        tensors = tensors.values()
    if not isinstance(tensors, Iterable):
        raise error(
            f"Receiver: expected tensors, a list of them or a callable, got {type(tensors).__name__}"
        )
    out = list(tensors)
    for t in out:
        if not isinstance(t, Tensor):
            raise error(f"Receiver: expected tensors, got a {type(t).__name__}")
    return out


def Receiver(  # noqa: N802 (the seed program's name)
    fn: Callable[..., None], tensors: object, name: str | None = None
) -> None:
    """Device -> host output: `fn(*arrays)` is called each time the program gets here.

    `tensors` is a Tensor, a list of them, or a callable returning them (such as
    `opt.parameters`); a `Parameter` gives its current value.
    `Receiver(save, opt.parameters, name="saving params")` records
    `tg.receiver "saving params", %w0, %b0, ...`.
    """
    prog = program()
    values = [t.value for t in _values(tensors)]
    key = _unique(name or "receiver", prog.receivers)
    emit(tg.ReceiverOp(key, values))
    prog.receivers[key] = fn


def _pipeline_name() -> str:
    from gradfuse.passes import PIPELINES

    return "tg" if "tg" in PIPELINES else "default"


def _write_back(params: dict[str, Parameter], values: dict[str, np.ndarray]) -> None:
    for key, param in params.items():
        if key in values:
            param.data = np.array(values[key], dtype=param.data.dtype)


def execute(backend: str | None = None, *, dtype: Any = None) -> Any:
    """Compiles the recorded program, runs it and writes the final params back.

    The backend is `backend`, else `$GRADFUSE_BACKEND`, else "reference" (the NumPy
    interpreter; the only one for now). Recording then starts anew, so a second
    `execute()` runs only what was recorded after the first. Returns the backend's
    result (for "reference", a `RunResult`). `dtype=np.float64` computes every float
    value in float64 (for checks against float64 NumPy); params keep their own dtype.
    `execute()`
    """
    name = backend or os.environ.get("GRADFUSE_BACKEND") or "reference"
    if name not in BACKENDS:
        raise GradfuseError(
            f'execute(): unknown or unavailable backend "{name}" (available: '
            + ", ".join(f'"{b}"' for b in BACKENDS)
            + ")"
        )
    from gradfuse.backend.reference import run
    from gradfuse.passes import run_pipeline

    prog = program()
    module = prog.module.clone()
    run_pipeline(module, _pipeline_name())
    initial = {key: p.data for key, p in prog.params.items()}
    new_program()
    try:
        result = run(
            module,
            feeders=prog.feeders,
            receivers=prog.receivers,
            params=initial,
            dtype=dtype or np.float32,
        )
    except GradfuseError as err:
        _write_back(prog.params, getattr(err, "params", {}))
        clean = GradfuseError(err.message, err.position)
        clean.params = getattr(err, "params", {})  # type: ignore[attr-defined]
        raise clean from None
    _write_back(prog.params, result.params)
    return result


__all__ = [
    "execute", "ir_for", "Feeder", "Receiver", "print_graph", "ir_text", "reset",
    "manual_seed", "BACKENDS",
]  # fmt: skip
