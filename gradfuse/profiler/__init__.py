"""gradfuse's kernel profiler (issue 14), shaped like `torch.profiler`. So far the
static part: what every launch is (layers, direction, FLOPs, bytes) and PyProf's
kernel table without times.

    from gradfuse.profiler import launches, kernel_table
    print(kernel_table(launches(kernel_module)))
"""

from gradfuse.profiler.launches import KernelWork, Launch, Loop, kernel_table, kernel_work, launches

__all__ = ["KernelWork", "Launch", "Loop", "kernel_table", "kernel_work", "launches"]
