"""PyTorch's losses (`reduction` 'mean', 'sum' or 'none'), as composites of tg ops:

F.mse_loss(y, t)                       # mean of squared differences
F.binary_cross_entropy(p, t)           # logs clamped at -100, as PyTorch's
F.binary_cross_entropy_with_logits(z, t, pos_weight=w)
F.cross_entropy(logits, labels)        # labels: class indices as floats
F.nll_loss(F.log_softmax(x, 1), labels)
F.l1_loss(y, t), F.smooth_l1_loss(y, t, beta=1.0), F.huber_loss(y, t, delta=1.0)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend.functional import constant, gather, log_softmax
from gradfuse.frontend.id_ranges import check_fed_ids
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss: Tensor, reduction: str, what: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise error(f"{what}: reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")


def _same_shape(what: str, input: Tensor, target: Tensor) -> None:
    if input.shape != target.shape:
        raise error(
            f"{what}: input {fmt_shape(input.shape)} and target {fmt_shape(target.shape)}"
            " differ in shape"
        )


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """`(input - target) ** 2`, averaged or summed. `mse_loss(y, t)`"""
    _same_shape("mse_loss", input, target)
    diff = input - target
    return _reduce(diff * diff, reduction, "mse_loss")


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """`|input - target|`, averaged or summed; the gradient at a tie is 0, as PyTorch's
    (the sign of 0)."""
    _same_shape("l1_loss", input, target)
    diff = input - target
    size = where(diff > 0.0, diff, 0.0) - where(diff < 0.0, diff, 0.0)  # (0 at 0, as its gradient)
    return _reduce(size, reduction, "l1_loss")


def _quadratic_then_linear(diff: Tensor, edge: float, scale: float) -> Tensor:
    """`0.5 d**2 / scale` where |d| < edge, else `edge / scale * (|d| - 0.5 edge)`."""
    size = where(diff > 0.0, diff, -diff)
    inner = diff * diff * (0.5 / scale)
    return where(size < edge, inner, (size - 0.5 * edge) * (edge / scale))


def smooth_l1_loss(
    input: Tensor, target: Tensor, size_average: object = None, reduce: object = None,
    reduction: str = "mean", beta: float = 1.0,
) -> Tensor:  # fmt: skip
    """`0.5 d**2 / beta` where `|d| < beta`, else `|d| - 0.5 beta` (d = input - target);
    `beta=0` is `l1_loss`. `smooth_l1_loss(y, t)`"""
    _same_shape("smooth_l1_loss", input, target)
    if beta < 0:
        raise error(f"smooth_l1_loss: beta must not be negative, got {beta}")
    if beta == 0:
        return l1_loss(input, target, reduction)
    return _reduce(_quadratic_then_linear(input - target, beta, beta), reduction, "smooth_l1_loss")


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """`0.5 d**2` where `|d| < delta`, else `delta * (|d| - 0.5 delta)`."""
    _same_shape("huber_loss", input, target)
    if delta <= 0:
        raise error(f"huber_loss: delta must be positive, got {delta}")
    return _reduce(_quadratic_then_linear(input - target, delta, 1.0), reduction, "huber_loss")


def kl_div(
    input: Tensor, target: Tensor, size_average: object = None, reduce: object = None,
    reduction: str = "mean", log_target: bool = False,
) -> Tensor:  # fmt: skip
    """`target * (log(target) - input)` for log-probabilities `input` (0 where the target
    is 0); `reduction="batchmean"` divides the sum by the batch size, as PyTorch's."""
    _same_shape("kl_div", input, target)
    if log_target:
        pointwise = target.exp() * (target - input)
    else:
        safe = where(target > 0.0, target, 1.0)
        pointwise = where(target > 0.0, target * (safe.log() - input), 0.0)
    if reduction == "batchmean":
        return pointwise.sum() * (1.0 / input.shape[0]) if input.ndim else pointwise.sum()
    return _reduce(pointwise, reduction, "kl_div")


def binary_cross_entropy(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """`-(t log p + (1 - t) log(1 - p))`, each log clamped at -100 as in PyTorch.

    `binary_cross_entropy(probs.sigmoid(), labels)`
    """
    _same_shape("binary_cross_entropy", input, target)
    log_p = input.log().maximum(-100.0)
    log_q = (1.0 - input).log().maximum(-100.0)
    value = -(target * log_p + (1.0 - target) * log_q)
    # PyTorch's gradient, (p - t) / max(p (1 - p), 1e-12): finite where p saturates at 0
    # or 1 (the clamped logs' own derivative would be 0 * inf there); the value is kept
    slope = ((input - target) / (input * (1.0 - input)).maximum(1e-12)).detach()
    moved = input * slope
    return _reduce(value.detach() + (moved - moved.detach()), reduction, "binary_cross_entropy")


def _loss_operand(what: str, name: str, value: object, input: Tensor) -> Tensor | None:
    """An optional `weight`-like argument (a Tensor, an array or a torch tensor) as a
    Tensor that broadcasts to `input`'s shape, or None."""
    if value is None:
        return None
    if not isinstance(value, Tensor):
        value = constant(
            np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        )  # type: ignore[attr-defined]
    rank = max(value.ndim, input.ndim)
    padded = (1,) * (rank - value.ndim) + value.shape
    if rank > input.ndim or any(
        a not in (1, b) for a, b in zip(padded[-input.ndim :], input.shape)
    ):
        raise error(
            f"{what}: {name} {fmt_shape(value.shape)} does not broadcast to the input"
            f" {fmt_shape(input.shape)}"
        )
    return value


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Binary cross-entropy of logits, stable for any logit `x`, as PyTorch computes it:
    `((1 - y) x + (1 + (pos_weight - 1) y) * softplus(-x)) * weight`, where
    `softplus(-x) = -log sigmoid(x) = log1p(exp(-|x|)) + max(-x, 0)` (`tg.log1p`).

    `|x|` and the max are `where(x > 0, ...)`, so the gradient is `sigmoid`'s exactly, at
    x = 0 too. `binary_cross_entropy_with_logits(logits, labels, pos_weight=pw)`
    """
    what = "binary_cross_entropy_with_logits"
    _same_shape(what, input, target)
    if size_average is not None or reduce is not None:  # PyTorch's deprecated arguments
        reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
    w = _loss_operand(what, "weight", weight, input)
    pw = _loss_operand(what, "pos_weight", pos_weight, input)
    x, y = input, target
    positive = x > 0.0
    softplus = where(positive, -x, x).exp().log1p() + where(positive, 0.0, -x)
    log_weight = softplus if pw is None else ((pw - 1.0) * y + 1.0) * softplus
    loss = (1.0 - y) * x + log_weight
    return _reduce(loss if w is None else loss * w, reduction, what)


def _at_targets(
    input: Tensor, target: Tensor, what: str, of: Callable[[Tensor], Tensor] | None = None,
    ignore_index: int | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:  # fmt: skip
    """`of(input)` (`input` itself by default) [N, C, ...] gathered along its class dim 1
    at the class indices `target` [N, ...] (floats holding integers), in the shape of
    `target`; `of(input)`; and, with an `ignore_index`, the mask of the targets that are
    not it (an ignored target gathers class 0, which the caller masks). Targets read
    from a `Feeder` (through views) are checked on the host at each call: one that is
    not an integer in [0, C) (or the ignore_index) stops the run with an error naming
    the feeder (`gradfuse.frontend.id_ranges`); other targets are not."""
    if input.ndim == 1:
        input, target = input.reshape(1, -1), target.reshape(1)
    if input.ndim < 2:
        raise error(f"{what}: input must have a class dim, got {fmt_shape(input.shape)}")
    want = input.shape[:1] + input.shape[2:]
    if target.shape != want:
        raise error(
            f"{what}: target {fmt_shape(target.shape)} must be the input"
            f" {fmt_shape(input.shape)} without its class dim 1: {fmt_shape(want)}"
        )
    index = target.reshape(want[:1] + (1,) + want[1:])
    classes = input.shape[1]
    check_fed_ids(
        index, classes, "class index", f"{what} over {classes} classes", "targets", ignore_index
    )
    keep = None
    if ignore_index is not None:
        keep = target != float(ignore_index)
        index = where(index != float(ignore_index), index, 0.0)
    values = of(input) if of is not None else input
    picked = gather(values, 1, index).reshape(want)
    return picked, values, keep


def _reduce_kept(loss: Tensor, keep: Tensor | None, reduction: str, what: str) -> Tensor:
    """`_reduce` over the targets `keep` holds (all without an ignore_index): the
    others count 0, and the mean divides by how many are kept (NaN if none, as PyTorch)."""
    if keep is None:
        return _reduce(loss, reduction, what)
    loss = where(keep, loss, 0.0)
    if reduction == "mean":
        return loss.sum() / keep.float().sum()
    return _reduce(loss, reduction, what)


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: object = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The negative log-likelihood of log-probabilities `input` [N, C, ...] (from
    `log_softmax` along dim 1) at class indices `target` [N, ...], as PyTorch's
    `F.nll_loss` (no `weight`, or the legacy `size_average`/`reduce`); targets equal to
    an `ignore_index` given other than the default count nothing (the default -100
    keeps targets in [0, C): a -100 fed is an error naming the feeder).
    `F.nll_loss(F.log_softmax(x, dim=1), labels)`"""
    for name, value, default in [
        ("weight", weight, None), ("size_average", size_average, None), ("reduce", reduce, None),
    ]:  # fmt: skip
        if value != default:
            raise error(f"nll_loss: {name}={value!r} is not supported (only {default!r})")
    ignore = None if ignore_index == -100 else int(ignore_index)
    picked, _, keep = _at_targets(input, target, "nll_loss", ignore_index=ignore)
    return _reduce_kept(-picked, keep, reduction, "nll_loss")


def cross_entropy(
    input: Tensor, target: Tensor, reduction: str = "mean", label_smoothing: float = 0.0,
    ignore_index: int = -100,
) -> Tensor:  # fmt: skip
    """Cross-entropy of logits `input` [N, C, ...] and class indices `target` [N, ...]:
    the log-softmax along the class dim 1 at the targets (see `_at_targets`);
    `label_smoothing` mixes in the mean over classes as PyTorch does; `ignore_index` as
    `nll_loss`'s. `cross_entropy(logits, labels)`
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise error(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    ignore = None if ignore_index == -100 else int(ignore_index)
    picked, logp, keep = _at_targets(
        input, target, "cross_entropy", lambda x: log_softmax(x, 1), ignore
    )
    loss = -picked
    if label_smoothing:
        loss = loss * (1.0 - label_smoothing) - logp.mean(1) * label_smoothing
    return _reduce_kept(loss, keep, reduction, "cross_entropy")


__all__ = [
    "mse_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy",
    "nll_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
]  # fmt: skip
