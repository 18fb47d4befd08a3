"""`gradfuse.nn.utils` (PyTorch's `torch.nn.utils`): gradient clipping, and `rnn`
(`pack_padded_sequence`, `pad_packed_sequence`: see `rnn_utils`).

loss.backward()
total = clip_grad_norm_(model.parameters(), 0.25)   # rescales every p.grad (tg ops)
opt.step()                                          # steps with the clipped gradients
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gradfuse.frontend.functional import constant, stack
from gradfuse.frontend.nn import rnn_utils as rnn
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scales the gradients of `parameters` so that their joint `norm_type`-norm is at most
    `max_norm`, as PyTorch: each `p.grad` is multiplied by `min(1, max_norm / (total +
    1e-6))`; returns the total norm from before (a rank-0 Tensor), `norm_type` may be inf.

    Parameters without a gradient are skipped; a following `opt.step()` uses the clipped
    gradients. `clip_grad_norm_(model.parameters(), 0.25)`
    """
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    p = float(norm_type)
    if not p > 0:
        raise error(f"clip_grad_norm_: norm_type must be positive or inf, got {norm_type!r}")
    if error_if_nonfinite:
        raise error(
            "clip_grad_norm_: error_if_nonfinite=True is not supported by gradfuse (the norm"
            " is computed on the device); execute(check_finite=True) stops at a non-finite param"
        )
    grads = [q.grad for q in params if getattr(q, "grad", None) is not None]
    if not grads:
        return constant(0.0)
    if math.isinf(p):
        total = stack([g.abs().max() for g in grads]).max()
    elif p == 2.0:
        total = stack([(g * g).sum() for g in grads]).sum().sqrt()
    else:
        total = stack([(g.abs() ** p).sum() for g in grads]).sum() ** (1.0 / p)
    coef = float(max_norm) / (total + 1e-6)
    clamped = where(coef < 1.0, coef, 1.0)
    for q in params:
        if getattr(q, "grad", None) is not None:
            q.grad = q.grad * clamped  # type: ignore[union-attr]
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None) -> None:  # fmt: skip
    """Clamps each gradient of `parameters` to [-clip_value, clip_value], as PyTorch's."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for q in params:
        if getattr(q, "grad", None) is not None:
            q.grad = q.grad.clamp(-float(clip_value), float(clip_value))  # type: ignore[union-attr]


__all__ = ["clip_grad_norm_", "clip_grad_value_", "rnn"]
