"""Host-side range checks of integer ids that a program reads from a feeder.

`Embedding` lookups and `cross_entropy` targets read float-encoded integer ids,
usually straight from a `Feeder`. An id out of range would read another row (or,
on the c backend, outside the table), so when the ids come from a feeder,
following reshapes, permutes, broadcasts, slices and widening casts back to its
`tg.feeder`, the valid range is registered for that feeder: every array its
callback returns is checked on the host before the program uses it, on every
backend and at no device cost:

    ids = Feeder(batch, shape=[N, L], name="tokens")
    h = Embedding(8, 32)(ids)
    execute()   # feeder "tokens" (call 3): raised ValueError: token id 9 at [0, 3] is
                # out of range for Embedding(8, 32): ids must be integers in [0, 8)

Only the elements the lookup reads are checked; positions in the message index the
array the feeder returned. When one feeder feeds several lookups every range is
checked, so the tightest wins. A feeder given as an array rather than a callback is
checked whole when the lookup is recorded, a `GradfuseError` at the user's line.
Ids computed otherwise (constants, arithmetic, parameters) are left unchecked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ints, shape_of
from gradfuse.frontend.recorder import error, program
from gradfuse.frontend.tensor import Tensor

_VIEWS = (tg.ReshapeOp, tg.PermuteOp, tg.BroadcastOp, tg.SliceOp)


@dataclass(frozen=True)
class IdRange:
    """Valid ids `[low, high)` for the fed elements at `positions` (flat; None: all).

    `noun` names one id ("token id"), `owner` what reads them ("Embedding(8, 32)"),
    `plural` the ids in the rule ("ids must be integers in [0, 8)").
    """

    low: int
    high: int
    noun: str
    owner: str
    plural: str
    positions: tuple[int, ...] | None = None
    also: int | None = None
    """One more valid id outside the range (a loss's `ignore_index`)."""

    def problem(self, arr: np.ndarray) -> str | None:
        """Why `arr` (one fed array) breaks this range, or None when it does not."""
        flat = arr.reshape(-1)
        if self.positions is not None:
            flat = flat[np.asarray(self.positions)]
        vals = flat.astype(np.float64)
        with np.errstate(invalid="ignore"):
            integral = np.floor(vals) == vals
            ok = integral & (vals >= self.low) & (vals < self.high)
            if self.also is not None:
                ok |= vals == self.also
        if ok.all():
            return None
        first = int(np.argmin(ok))
        at = first if self.positions is None else self.positions[first]
        index = [int(i) for i in np.unravel_index(at, arr.shape)] if arr.ndim else []
        value = float(vals[first])
        shown = str(int(value)) if integral[first] else format(value, "g")
        reason = "is out of range" if integral[first] else "is not an integer"
        return (
            f"{self.noun} {shown} at {index} {reason} for {self.owner}:"
            f" {self.plural} must be integers in [{self.low}, {self.high})"
            + ("" if self.also is None else f" or {self.also} (ignore_index)")
        )


class CheckedFeeder:
    """A feeder callback whose every result is checked against `ranges` before use.

    A result of another shape or dtype than the feeder's is passed on unchecked: the
    backend then reports what is wrong with it.
    """

    def __init__(self, source: Callable[[], Any], shape: tuple[int, ...]):
        self.source = source
        self.shape = shape
        self.ranges: list[IdRange] = []

    def add(self, rng: IdRange) -> None:
        """Checks `rng` too (once); the tightest ranges are checked first."""
        if rng not in self.ranges:
            self.ranges.append(rng)
            self.ranges.sort(key=lambda r: r.high - r.low)

    def __call__(self) -> Any:
        value = self.source()
        try:
            arr = np.asarray(value)
        except Exception:
            return value
        if arr.shape != self.shape or arr.dtype.kind not in "biuf":
            return value
        for rng in self.ranges:
            message = rng.problem(arr)
            if message is not None:
                raise ValueError(message)
        return value


def _widening(op: Operation) -> bool:
    """Whether `op` is a cast that keeps every value (from ints, or to a wider float)."""
    if not isinstance(op, tg.CastOp):
        return False
    src = op.input.type.element_type  # type: ignore[attr-defined]
    dst = op.result.type.element_type  # type: ignore[attr-defined]
    if isinstance(src, IntegerType):
        return True
    return getattr(dst, "bitwidth", 0) >= getattr(src, "bitwidth", 1 << 30)


def feeder_of(value: SSAValue) -> tuple[tg.FeederOp, tuple[int, ...] | None] | None:
    """The feeder `value` is a view of, and the flat positions of its elements read.

    Positions are None when every element is read. None when `value` does not come
    from a feeder through views and widening casts only.
    """
    chain: list[Operation] = []
    while True:
        owner = value.owner
        if isinstance(owner, tg.FeederOp):
            break
        if not isinstance(owner, Operation):
            return None
        if not (isinstance(owner, _VIEWS) or _widening(owner)):
            return None
        chain.append(owner)
        value = owner.operands[0]
    shape = shape_of(owner.result)
    pos = np.arange(prod(shape)).reshape(shape)
    for op in reversed(chain):
        if isinstance(op, tg.ReshapeOp):
            pos = pos.reshape(shape_of(op.result))
        elif isinstance(op, tg.PermuteOp):
            pos = pos.transpose(ints(op.perm))
        elif isinstance(op, tg.BroadcastOp):
            pos = np.broadcast_to(pos, shape_of(op.result))
        elif isinstance(op, tg.SliceOp):
            window = zip(ints(op.starts), ints(op.limits), ints(op.strides))
            pos = pos[tuple(slice(lo, hi, st) for lo, hi, st in window)]
    used = np.unique(pos)
    return owner, (None if used.size == prod(shape) else tuple(int(p) for p in used))


def _check_array(key: str, source: Any, shape: tuple[int, ...], rng: IdRange) -> None:
    """Checks an array feeder (one item, or one per call) now, at the user's line."""
    arr = np.asarray(source)
    if arr.dtype.kind not in "biuf":
        return
    if arr.shape == shape:
        items = [(f'feeder "{key}"', arr)]
    elif arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
        items = [(f'feeder "{key}" (call {i})', item) for i, item in enumerate(arr)]
    else:
        return
    for where, item in items:
        message = rng.problem(item)
        if message is not None:
            raise error(f"{where}: {message}")


def check_fed_ids(
    index: Tensor, high: int, noun: str, owner: str, plural: str, also: int | None = None
) -> None:
    """Registers `[0, high)` as the valid ids of the feeder `index` comes from, if any.

    `check_fed_ids(ids, 8, "token id", "Embedding(8, 32)", "ids")`; see the module doc.
    """
    found = feeder_of(index.value)
    if found is None:
        return
    op, positions = found
    key = op.key.data
    feeders = program().feeders
    if key not in feeders:
        return
    rng = IdRange(0, high, noun, owner, plural, positions, also)
    source = feeders[key]
    shape = shape_of(op.result)
    if isinstance(source, CheckedFeeder):
        source.add(rng)
    elif callable(source):
        checked = CheckedFeeder(source, shape)
        checked.add(rng)
        feeders[key] = checked
    else:
        _check_array(key, source, shape, rng)
