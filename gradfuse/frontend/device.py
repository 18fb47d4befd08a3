"""PyTorch's device names, for code that writes `device = torch.device("cuda" if
torch.cuda.is_available() else "cpu")` and `model.to(device)`: gradfuse compiles the
whole program for one backend, chosen by `execute()` (cuda where PyCUDA sees a GPU,
else c), so a device names where that is and moving a tensor or module to one changes
nothing:

    device = gradfuse.device("cuda" if gradfuse.cuda.is_available() else "cpu")
    x.device                 # device(type='cuda') on a machine with a GPU, else cpu
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gradfuse.backend import cuda_available


class device:  # noqa: N801 (torch's name)
    """A device: `device("cuda")`, `device("cuda:0")`, `device("cpu")`, `device("cuda", 1)`."""

    def __init__(self, type: Any, index: int | None = None):  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index
        name, _, number = str(type).partition(":")
        self.type = name
        self.index = int(number) if number else index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


@cache
def has_gpu() -> bool:
    """Whether `execute()` would choose the cuda backend's GPU (PyCUDA sees one)."""
    return cuda_available()


def default_device() -> device:
    """Where a program runs by default: the GPU where there is one, else the CPU."""
    return device("cuda" if has_gpu() else "cpu")


def is_available() -> bool:
    """`torch.cuda.is_available()` and `torch.accelerator.is_available()`."""
    return has_gpu()


def device_count() -> int:
    """The GPUs `execute()` can use here: 1 where there is one (it runs on one), else 0."""
    return int(has_gpu())


def current_accelerator() -> device | None:
    """`torch.accelerator.current_accelerator()`: the GPU's device, else None."""
    return device("cuda") if has_gpu() else None
