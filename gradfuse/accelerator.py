"""`gradfuse.accelerator`: `torch.accelerator.is_available()` and
`current_accelerator()`, as PyTorch's quickstart picks its device:

    device = gradfuse.accelerator.current_accelerator().type if gradfuse.accelerator.is_available() else "cpu"
"""

from gradfuse.frontend.device import current_accelerator, device_count, is_available

__all__ = ["current_accelerator", "device_count", "is_available"]
