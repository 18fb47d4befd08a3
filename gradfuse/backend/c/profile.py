"""The c backend's profiling build: every host site timed with the C clock.

`render_program(module, profile=True)` wraps each kernel call, feeder and receiver
callback, all-reduce (`MPI_Allreduce`) and param-save `memcpy` of the host program in
`GF_TIMED(site, kind, ...)`,
and brackets each iteration of an outermost loop (a step) with a `step` event. Times are
`clock_gettime(CLOCK_MONOTONIC)` in ns, the clock of Python's `time.monotonic_ns()`.
Events go into a buffer the caller gives in the context, and only for iterations in the
window [first, last) given at run time: outside it each site costs a test of `gf_on`
before and after (a flag set once per iteration), and no clock read. Sites outside every
outermost loop run at iteration -1, recorded when -1 lies in the window. The default
build (`profile=False`) is byte-identical to a build without this module.

    program = compile_c(lowered_module, profile=True)
    result = program.run(feeders={"x": x}, profile=(1, 3))   # steps 1 and 2
    for e in result.events:
        print(e.iteration, e.kind, e.name, e.duration_ns)
    # 1 feeder feeder 54411      (the seed MLP at 16 x 2: a Python callback)
    # 1 kernel r0 1132
    # 1 kernel g6 530
    # 1 step loop 0 56183

A site's `launch` is its number among the kernel and callback sites in program order
(param copies and steps have none): for a one-function program it indexes the list of
`gradfuse.profiler.launches(module_after_kernels)`, whose records come in the same
order (a `kernel.kernel`, `kernel.group` or `kernel.rows` is one kernel `func.call`, a
`kernel.feed` / `kernel.receive` one callback), and the site's `name` is that record's
`symbol`: the launched kernel's name or the callback's key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gradfuse.backend.runner import Event

KINDS = ("kernel", "feeder", "receiver", "copy", "step", "allreduce")
"""Event kinds, by the number the C code records."""

HEADER = """#include <time.h>
typedef struct { long long site, kind, iteration, start, end; } gf_event;
"""

FIELDS = "  gf_event* events; long capacity; long count; long first; long last;\n"
"""The context's profiling fields, after `check` (the Python struct always has them)."""

RUNTIME = """static inline long long gf_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void gf_record(gf_ctx* ctx, long site, long kind, long iteration, long long start) {
  long long end = gf_now();
  long n = ctx->count++;  /* past capacity: counted, not written (Python raises) */
  if (n < ctx->capacity) {
    gf_event* e = &ctx->events[n];
    e->site = site; e->kind = kind; e->iteration = iteration; e->start = start; e->end = end;
  }
}
#define GF_IN_WINDOW(it) ((it) >= ctx->first && (it) < ctx->last)
#define GF_TIMED(site, kind, ...) { long long gf_t0 = gf_on ? gf_now() : 0; \\
  __VA_ARGS__ if (gf_on) gf_record(ctx, site, kind, gf_iter, gf_t0); }
"""

EVENT = np.dtype([(n, "<i8") for n in ("site", "kind", "iteration", "start", "end")])
"""`gf_event` as NumPy reads it."""


def profiled_context(context: str) -> str:
    """The host prelude `context` with the event type, the profiling fields of `gf_ctx`
    and the clock helpers: `typedef struct {...; gf_check_fn check;\\n  gf_event* events;
    ...} gf_ctx;`."""
    anchor = "  gf_check_fn check;\n} gf_ctx;\n"
    assert anchor in context, "gf_ctx changed: update gradfuse/backend/c/profile.py"
    fields = context.replace(anchor, anchor.replace("}", FIELDS + "}"))
    return HEADER + fields + RUNTIME


@dataclass(frozen=True)
class Site:
    """One timed place of the host program: `index` is what its events record.

    `name` is the kernel (the `func.call`'s callee), the callback's key, the
    param copied (`copy`: its index in `ctx->params`) or the loop's function (`step`);
    `launch` its index in `launches()` (kernels and callbacks only); `loop` the outermost
    loop it is in (None outside loops) and `per_iteration` how often one iteration of
    that loop runs it (inner trip counts multiplied; None where a bound is not constant).
    """

    index: int
    kind: str
    name: str
    launch: int | None
    loop: int | None
    per_iteration: int | None


def capacity(sites: Sequence[Site], trips: Sequence[int | None], window: tuple[int, int]) -> int:
    """Events a run can record in `window`: each site's executions per iteration times
    the iterations of its loop inside the window (sites outside loops: once, if -1 is in
    the window). A site with an unknown count reserves 4096 per iteration."""
    first, last = window
    total = 0
    for s in sites:
        if s.loop is None:
            total += (s.per_iteration or 4096) if first <= -1 < last else 0
            continue
        n = trips[s.loop]
        iterations = max(0, min(last, n if n is not None else last) - max(first, 0))
        total += iterations * (s.per_iteration or 4096)
    return total


def read_events(buffer: np.ndarray, count: int, sites: Sequence[Site]) -> list[Event]:
    """The first `count` records of `buffer` (dtype `EVENT`) as `Event`s, each named by
    its site, in the order they were recorded (a step after the events inside it)."""
    out = []
    for site, kind, iteration, start, end in buffer[:count].tolist():
        s = sites[site]
        out.append(Event(site, KINDS[kind], s.name, s.launch, iteration, start, end))
    return out
