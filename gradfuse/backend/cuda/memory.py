"""Device memory for the CUDA backend: an allocation that fails says how much it asked
for and how much the device has free, in one sentence.

    device_alloc(drv, 3 << 30, 'param "fc.weight"')
    # GradfuseError: the GPU is out of memory: param "fc.weight" needs 3.0 GiB, and
    # 1.2 GiB of 79.1 GiB are free
"""

from __future__ import annotations

from typing import Any

from gradfuse.diagnostics import GradfuseError


def human(nbytes: int) -> str:
    """A byte count for people: 512 -> "512 B", 3 << 30 -> "3.0 GiB"."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def device_alloc(drv: Any, nbytes: int, what: str) -> Any:
    """`drv.mem_alloc(nbytes)` (PyCUDA's driver module), or one clear error naming
    `what` needed the memory when the device has too little."""
    try:
        return drv.mem_alloc(max(nbytes, 1))
    except getattr(drv, "MemoryError", MemoryError):
        free, total = drv.mem_get_info()
        raise GradfuseError(
            f"the GPU is out of memory: {what} needs {human(nbytes)}, and {human(free)} of"
            f" {human(total)} are free"
        ) from None
