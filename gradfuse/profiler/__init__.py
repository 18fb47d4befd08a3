"""gradfuse's kernel profiler, shaped like `torch.profiler`: every fused launch timed and
named by its layers and direction, PyProf's kernel table, torch's `key_averages`, a
Chrome/TensorBoard trace and the step overview.

    from gradfuse.profiler import profile, schedule, tensorboard_trace_handler
    with profile(schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler("runs/dcgan"), with_flops=True) as prof:
        execute()
    print(prof.key_averages().table(sort_by="self_time_total", row_limit=20))
    print(prof.kernel_table())   # PyProf-style, one row per launch of a recorded step
    prof.export_chrome_trace("trace.json")
    print(prof.overview())

Without running anything, `kernel_table(launches(kernel_module))` says what each launch
is (layers, direction, FLOPs, bytes).
"""

from gradfuse.profiler.launches import KernelWork, Launch, Loop, kernel_table, kernel_work, launches
from gradfuse.profiler.schedule import ProfilerAction, schedule
from gradfuse.profiler.session import profile
from gradfuse.profiler.steps import Span, Step
from gradfuse.profiler.trace import tensorboard_trace_handler

__all__ = [
    "KernelWork", "Launch", "Loop", "ProfilerAction", "Span", "Step", "kernel_table",
    "kernel_work", "launches", "profile", "schedule", "tensorboard_trace_handler",
]  # fmt: skip
