"""`gradfuse.cuda`: `torch.cuda.is_available()` and `device_count()` (gradfuse's cuda
backend runs where PyCUDA sees a GPU). `if gradfuse.cuda.is_available(): ...`"""

from gradfuse.frontend.device import device_count, is_available

__all__ = ["device_count", "is_available"]
