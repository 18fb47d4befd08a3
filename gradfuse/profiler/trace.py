"""Chrome trace-event JSON in the shape torch.profiler writes, and TensorBoard's handler.

The trace opens in Perfetto (ui.perfetto.dev), chrome://tracing and TensorBoard's
profiler plugin (`torch-tb-profiler`). Each step is a `ProfilerStep#N` event
(`user_annotation`) on the host thread; kernels (`kernel`) and param copies
(`gpu_memcpy`) sit on the device stream, callbacks and tg ops (`cpu_op`) on the host
thread, all as complete events (`ph: "X"`, `ts` and `dur` in µs) whose args carry the
layer, direction, FLOPs and bytes.

    prof.export_chrome_trace("trace.json")
    with profile(on_trace_ready=tensorboard_trace_handler("runs/mlp")):
        execute()                     # runs/mlp/<host>_<pid>.<ms>.pt.trace.json
    # tensorboard --logdir runs       (pip install torch-tb-profiler)
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gradfuse.diagnostics import GradfuseError
from gradfuse.profiler.steps import Span, Step

HOST_TID = 1
DEVICE_TID = 7
"""Thread ids: the host thread, and the device "stream" (torch's default stream is 7)."""

DEVICE_KINDS = ("kernel", "copy")


def _args(span: Span) -> dict[str, Any]:
    args: dict[str, Any] = {"layer": ",".join(span.layers) or "-", "direction": span.direction}
    if span.launch is not None:
        args.update(op=span.launch.op, params=span.launch.params)
    args.update(flops=span.flops, bytes_read=span.bytes_read, bytes_written=span.bytes_written)
    if span.source:
        args["source"] = span.source
    if span.grid:
        args.update(grid=span.grid, block=span.block)
    return args


def chrome_trace(steps: Sequence[Step], *, pid: int | None = None) -> dict[str, Any]:
    """The trace of `steps` as a JSON-ready dict (`schemaVersion`, `traceEvents`, ...)."""
    pid = os.getpid() if pid is None else pid
    events: list[dict[str, Any]] = []
    for tid, name in ((HOST_TID, "host"), (DEVICE_TID, "stream 7")):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": name}})  # fmt: skip
    for step in steps:
        events.append({
            "ph": "X", "cat": "user_annotation", "name": step.name, "pid": pid,
            "tid": HOST_TID, "ts": step.start_us, "dur": step.dur_us,
            "args": {"backend": step.backend},
        })  # fmt: skip
        for span in step.spans:
            tid = DEVICE_TID if span.kind in DEVICE_KINDS else HOST_TID
            events.append({
                "ph": "X", "cat": span.category, "name": span.trace_name, "pid": pid,
                "tid": tid, "ts": span.start_us, "dur": span.dur_us, "args": _args(span),
            })  # fmt: skip
    backend = steps[0].backend if steps else ""
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {"backend": "", "rank": 0, "world_size": 1},
        "displayTimeUnit": "ms",
        "traceName": f"gradfuse ({backend})",
        "traceEvents": events,
    }


def export_chrome_trace(steps: Sequence[Step], path: str | Path) -> None:
    """Writes `chrome_trace(steps)` to `path` as JSON."""
    try:
        Path(path).write_text(json.dumps(chrome_trace(steps)))
    except OSError as err:
        raise GradfuseError(f"cannot write the trace to {path}: {err.strerror}") from None


def tensorboard_trace_handler(
    dir_name: str | Path, worker_name: str | None = None, use_gzip: bool = False
) -> Callable[[Any], None]:
    """torch's handler: writes each saved cycle of a profile to
    `dir_name/<worker>.<ms>.pt.trace.json[.gz]`, which TensorBoard's profiler plugin
    reads (`tensorboard --logdir <parent of dir_name>`)."""
    directory = Path(dir_name)
    worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"

    def handler(prof: Any) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise GradfuseError(f"cannot create the trace directory {directory}: {err}") from None
        stamp, suffix = time.time_ns() // 1_000_000, ".pt.trace.json" + ".gz" * use_gzip
        while (directory / f"{worker}.{stamp}{suffix}").exists():  # two cycles in one ms
            stamp += 1
        data = json.dumps(chrome_trace(prof.steps)).encode()
        (directory / f"{worker}.{stamp}{suffix}").write_bytes(
            gzip.compress(data) if use_gzip else data
        )

    return handler
