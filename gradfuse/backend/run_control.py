"""How a run stops early and keeps what it finished, shared by every backend.

- Ctrl-C (SIGINT) raises `KeyboardInterrupt` (not a `GradfuseError`) whose `params`
  hold the params as the last finished iteration of the outermost loop left them
  (`interrupted`); the Python backends restore them when the interrupt lands inside
  an iteration, the compiled ones stop at the next iteration boundary (a flag set by
  a signal handler, checked once per iteration).
- `check_finite` runs stop at the first NaN or infinity that a feeder returns
  (`RunState.feed`) or that a param holds after an iteration (`check_params_finite`).

    raise interrupted({k: v.copy() for k, v in params.items()})
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
from xdsl.ir import Operation

from gradfuse.diagnostics import GradfuseError, Position, position_of


def interrupted(
    params: Mapping[str, np.ndarray], cause: BaseException | None = None
) -> KeyboardInterrupt:
    """A `KeyboardInterrupt` (`cause` itself when given) carrying `params` (copies)."""
    err = cause if isinstance(cause, KeyboardInterrupt) else KeyboardInterrupt()
    err.params = {k: np.array(v) for k, v in params.items()}  # type: ignore[attr-defined]
    return err


def first_non_finite(value: np.ndarray) -> str | None:
    """`nan at index (0, 3)` for the first non-finite element of a float array, else None."""
    arr = np.asarray(value)
    if arr.dtype.kind != "f":
        return None
    bad = ~np.isfinite(arr)
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{arr[index]} at index {index}"


def check_params_finite(params: Mapping[str, np.ndarray], when: str) -> None:
    """Raises a `GradfuseError` naming the first param with a NaN or infinity."""
    for key, value in params.items():
        found = first_non_finite(value)
        if found is not None:
            raise GradfuseError(f'check_finite: param "{key}" is not finite {when} ({found})')


def check_fed_finite(where: str, value: np.ndarray, position: Position | None) -> None:
    """Raises a `GradfuseError` if what a feeder returned holds a NaN or infinity."""
    found = first_non_finite(value)
    if found is not None:
        raise GradfuseError(
            f"{where}: returned a non-finite value ({found}) (check_finite)", position
        )


@contextmanager
def sigint_flag(install: Callable[[], Any], remove: Callable[[], bool]) -> Iterator[list[bool]]:
    """Around a compiled run: `install()` its SIGINT handler (a flag the run checks once
    per iteration) when Python would raise KeyboardInterrupt here (the main thread, the
    default handler); the yielded list gets `remove()`'s answer: whether one came.
    Python's own handler is then set again at the system level: `remove()` puts back
    what the system held when `install()` ran, which need not be it (a handler left
    ignored behind Python's back, or another run's of the same library, whose saved
    handler the two share), and a Ctrl-C after the run must raise KeyboardInterrupt."""
    catch = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    came: list[bool] = []
    if catch:
        install()
    try:
        yield came
    finally:
        if catch:
            came.append(bool(remove()))
            signal.signal(signal.SIGINT, signal.default_int_handler)


__all__ = [
    "interrupted", "first_non_finite", "check_params_finite", "check_fed_finite", "sigint_flag",
]  # fmt: skip


def in_iteration(err: GradfuseError, loop: Operation, iteration: int, index: int) -> GradfuseError:
    """`err` again, saying in which iteration of which (nested) `tg.for` it happened:
    `... (in iteration 3 (i = 3) of the tg.for at model.tg:12:5)`."""
    base: str = getattr(err, "tg_base_message", err.message)
    pos = position_of(loop.location)
    here = f"iteration {iteration} (i = {index}) of the tg.for" + (f" at {pos}" if pos else "")
    loops: list[str] = [here, *getattr(err, "tg_loops", [])]
    new = GradfuseError(f"{base} (in {', '.join(loops)})", err.position)
    new.tg_base_message = base  # type: ignore[attr-defined]
    new.tg_loops = loops  # type: ignore[attr-defined]
    return new
