"""Which steps a profile records: `torch.profiler.schedule`'s rule, resolved ahead.

torch calls its schedule at every `prof.step()`; in gradfuse the training loop runs
inside the compiled program, so the schedule is read before the run: `recorded()` gives the
steps to record, and the profiler hands the compiled program the iterations
[first, last) that cover them.

    from gradfuse.profiler import schedule
    s = schedule(wait=1, warmup=1, active=2)
    [s(i).name for i in range(5)]  # NONE, WARMUP, RECORD, RECORD_AND_SAVE, NONE
    recorded(s, 0, 10)             # [2, 3]
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from gradfuse.diagnostics import GradfuseError


class ProfilerAction(Enum):
    """What the profiler does at a step (torch's names)."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


Schedule = Callable[[int], ProfilerAction]


def schedule(
    *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0
) -> Schedule:
    """torch's schedule: skip `skip_first` steps, then cycles of `wait` idle, `warmup`
    and `active` recorded steps, `repeat` cycles (0: until the program ends). The last
    active step of a cycle is `RECORD_AND_SAVE`: its cycle goes to `on_trace_ready`."""
    for name, value in (("wait", wait), ("warmup", warmup), ("repeat", repeat),
                        ("skip_first", skip_first), ("active", active - 1)):  # fmt: skip
        if not isinstance(value, int) or value < 0:
            least = 1 if name == "active" else 0
            raise GradfuseError(f"schedule({name}=...) must be an int >= {least}")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat and step // cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def always(step: int) -> ProfilerAction:
    """The schedule of a profile without one: every step recorded, one trace at the end."""
    return ProfilerAction.RECORD


RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def recorded(rule: Schedule, first: int, last: int) -> list[int]:
    """The steps of [first, last) that `rule` records."""
    return [step for step in range(first, last) if rule(step) in RECORDING]
