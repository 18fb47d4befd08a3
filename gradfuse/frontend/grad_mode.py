"""PyTorch's gradient modes: `no_grad`, `enable_grad`, `set_grad_enabled`, `inference_mode`.

Under `no_grad()` the ops recorded carry no gradient: each value that comes in from
outside (a parameter, a tensor computed before) enters through a `tg.stop_gradient`,
so that `backward()` never reaches through them, as PyTorch records no graph there.
Each is a context manager and a decorator:

    with gradfuse.no_grad():           # %w0 = tg.stop_gradient %w
        for p in model.parameters():   # %u = tg.mul %g, 0.1 ; %n = tg.sub %w0, %u
            p -= p.grad * 0.1          # tg.assign "0.weight" %n
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from gradfuse.frontend.recorder import is_grad_enabled, set_grad_mode

FnT = TypeVar("FnT", bound=Callable[..., Any])

__all__ = ["enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled"]


class set_grad_enabled:  # noqa: N801 (torch's name)
    """Gradients on (`mode=True`) or off while inside; the mode is set at once, as
    PyTorch's `torch.set_grad_enabled(False)` also works as a plain call."""

    def __init__(self, mode: bool = True):
        self.prev = set_grad_mode(mode)
        self.mode = bool(mode)

    def __enter__(self) -> None:
        set_grad_mode(self.mode)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        set_grad_mode(self.prev)

    def __call__(self, fn: FnT) -> FnT:
        """As a decorator: `fn` runs in this mode."""
        mode = self.mode

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            prev = set_grad_mode(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                set_grad_mode(prev)

        return wrapped  # type: ignore[return-value]


class _Mode(set_grad_enabled):
    """A mode set on entering (not on construction), usable as a decorator with or
    without the call: `@gradfuse.no_grad()` and `@gradfuse.no_grad`."""

    MODE = False

    def __new__(cls, fn: Callable[..., Any] | None = None) -> Any:
        if callable(fn):
            return cls()(fn)
        return super().__new__(cls)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.prev, self.mode = is_grad_enabled(), self.MODE

    def __enter__(self) -> None:
        self.prev = set_grad_mode(self.mode)


class no_grad(_Mode):  # noqa: N801
    """No gradient flows through what is recorded inside. `with gradfuse.no_grad(): ...`"""


class enable_grad(_Mode):  # noqa: N801
    """Gradients on again inside a `no_grad` block."""

    MODE = True


class inference_mode(_Mode):  # noqa: N801
    """`no_grad` (PyTorch's faster variant of it; gradfuse records the same for both);
    `inference_mode(False)` leaves gradients on."""

    def __init__(self, mode: bool = True) -> None:  # type: ignore[override]
        self.prev, self.mode = is_grad_enabled(), not mode
