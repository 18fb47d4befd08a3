"""PyTorch's distances and its margin, embedding and likelihood losses, as composites of
tg ops written as ATen writes them (the same values where a clamp or a mask decides):

    F.cosine_similarity(a, b)              # a / max(|a|, eps) . b / max(|b|, eps)
    F.pairwise_distance(a, b)              # |a - b + eps| along the last dim
    F.triplet_margin_loss(a, p, n)         # max(margin + d(a, p) - d(a, n), 0)
    F.margin_ranking_loss(x1, x2, y)       # max(-y (x1 - x2) + margin, 0)
    F.gaussian_nll_loss(mu, t, var)        # (log var + (mu - t)^2 / var) / 2

A target of +-1 labels (`y`) is a tensor of floats, as gradfuse's other targets.
"""

from __future__ import annotations

import math

from gradfuse.frontend.functional_act import logsigmoid
from gradfuse.frontend.functional_loss import _reduce
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where
from gradfuse.frontend.tensor_reduce import _positions

__all__ = [
    "cosine_similarity", "pairwise_distance", "margin_ranking_loss", "hinge_embedding_loss",
    "soft_margin_loss", "cosine_embedding_loss", "triplet_margin_loss", "poisson_nll_loss",
    "gaussian_nll_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
]  # fmt: skip


def _clamped_min(x: Tensor, low: float) -> Tensor:
    """`max(x, low)` whose gradient is x's everywhere: PyTorch's `clamp_min_` under
    `no_grad()` of a clone (the clamp changes the value, not the gradient's path)."""
    return x + (x.clamp(min=low) - x).detach()


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between x1 and x2 along `dim`: each divided by its 2-norm
    clamped at `eps` first, as PyTorch's (the result stays in [-1, 1])."""
    n1 = _clamped_min(x1.norm(2, dim, keepdim=True), eps)
    n2 = _clamped_min(x2.norm(2, dim, keepdim=True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """The `p`-norm of `x1 - x2 + eps` along the last dim."""
    diff = x1 - x2 + eps
    return diff.norm(p, diff.ndim - 1, keepdim)


def margin_ranking_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`max(-y (x1 - x2) + margin, 0)`."""
    if not input1.ndim == input2.ndim == target.ndim:
        shapes = ", ".join(str(list(t.shape)) for t in (input1, input2, target))
        raise error(f"margin_ranking_loss: all input tensors should have the same rank, got {shapes}")
    loss = (-target * (input1 - input2) + margin).clamp(min=0.0)
    return _reduce(loss, reduction, "margin_ranking_loss")


def hinge_embedding_loss(
    input: Tensor, target: Tensor, margin: float = 1.0,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`x` where y is 1, `max(margin - x, 0)` where y is -1 (ATen's two masked terms)."""
    hinge = (margin - input).clamp(min=0.0)
    loss = where(target != 1.0, hinge, 0.0) + where(target != -1.0, input, 0.0)
    return _reduce(loss, reduction, "hinge_embedding_loss")


def soft_margin_loss(
    input: Tensor, target: Tensor,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`log(1 + exp(-y x))`."""
    return _reduce((-input * target).exp().log1p(), reduction, "soft_margin_loss")


def cosine_embedding_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`1 - cos` where y is 1, `max(cos - margin, 0)` where y is -1; cos as ATen's,
    `x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12))` along the last dim."""
    d = input1.ndim - 1
    dot = (input1 * input2).sum(d)
    squares = ((input1 * input1).sum(d) + 1e-12) * ((input2 * input2).sum(d) + 1e-12)
    cos = dot / squares.sqrt()
    loss = where(target == 1.0, 1.0 - cos, 0.0) + where(target == -1.0, (cos - margin).clamp(min=0.0), 0.0)  # fmt: skip
    return _reduce(loss, reduction, "cosine_embedding_loss")


def triplet_margin_loss(
    anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2.0,
    eps: float = 1e-6, swap: bool = False,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`max(margin + d(a, p) - d(a, n), 0)` with `pairwise_distance`; `swap` takes the
    smaller of d(a, n) and d(p, n)."""
    near = pairwise_distance(anchor, positive, p, eps)
    far = pairwise_distance(anchor, negative, p, eps)
    if swap:
        far = -(-far).maximum(-pairwise_distance(positive, negative, p, eps))
    return _reduce((near - far + margin).clamp(min=0.0), reduction, "triplet_margin_loss")


def poisson_nll_loss(
    input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
    size_average: object = None, eps: float = 1e-8, reduce: object = None,
    reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`exp(x) - t x` (`log_input`), else `x - t log(x + eps)`; `full` adds Stirling's
    `t log t - t + log(2 pi t) / 2` where t > 1."""
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        t = where(target > 1.0, target, 2.0)  # (a finite stand-in where the term is 0)
        stirling = t * t.log() - t + (t * (2 * math.pi)).log() * 0.5
        loss = loss + where(target > 1.0, stirling, 0.0)
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(
    input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,
    eps: float = 1e-6, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`(log v + (x - t)^2 / v) / 2` with v = var clamped at `eps` (its gradient as if
    not clamped, as PyTorch's); `var` may lack input's last dim or have it of size 1
    (one variance a row); `full` adds `log(2 pi) / 2`."""
    if isinstance(var, int | float):
        var = input.detach() * 0.0 + float(var)
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:
            var = var.unsqueeze(-1)
        elif not (var.shape[:-1] == input.shape[:-1] and var.shape[-1] == 1):
            raise error(f"gaussian_nll_loss: var {list(var.shape)} is of incorrect size for input {list(input.shape)}")  # fmt: skip
    v = _clamped_min(var, eps)
    loss = (v.log() + (input - target) * (input - target) / v) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def multilabel_soft_margin_loss(
    input: Tensor, target: Tensor, weight: Tensor | None = None,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`-(y log sigmoid(x) + (1 - y) log sigmoid(-x))`, weighted, averaged over classes."""
    loss = -(target * logsigmoid(input) + (1.0 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    d = input.ndim - 1
    return _reduce(loss.sum(d) * (1.0 / input.shape[d]), reduction, "multilabel_soft_margin_loss")


def multi_margin_loss(
    input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,
    weight: Tensor | None = None,
    size_average: object = None, reduce: object = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """`sum over i != y of max(0, margin - x[y] + x[i])^p / C` a sample (`p` 1 or 2),
    times `weight[y]`; the gradient passes where the hinge is strictly positive."""
    if p not in (1, 2):
        raise error(f"multi_margin_loss: p must be 1 or 2, got {p!r}")
    x = input if input.ndim == 2 else input.unsqueeze(0)
    y = (target if target.ndim == 1 else target.reshape(1)).float().unsqueeze(1)
    c = x.shape[1]
    z = margin - x.gather(1, y) + x
    hinge = where(z > 0.0, z, 0.0)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * weight.gather(0, y.reshape(-1)).unsqueeze(1)
    classes = _positions(x, 1)  # [1, C]: 0, 1, ... C - 1
    loss = where(classes != y, hinge, 0.0).sum(1) * (1.0 / c)  # (i = y adds nothing)
    return _reduce(loss if input.ndim == 2 else loss.reshape([]), reduction, "multi_margin_loss")
