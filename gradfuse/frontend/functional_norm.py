"""PyTorch's normalizations beyond `layer_norm` and `batch_norm`, as composites of tg ops:

F.group_norm(x, 8, weight, bias)   # x [N, C, ...]: C / 8 channels share statistics
F.instance_norm(x)                 # each sample's channel on its own (no running stats)
F.normalize(x, dim=1)              # x / max(||x||_2, eps) along dim 1
"""

from __future__ import annotations

from math import prod

from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend.functional import layer_norm
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor
from gradfuse.frontend.tensor_shape import per_channel


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """`input` [N, C, ...] normalised to mean 0 and (biased) variance 1 over each group of
    C / num_groups channels and all of their positions, then scaled and shifted per
    channel by `weight` and `bias` [C], as PyTorch's `group_norm`."""
    if input.ndim < 2 or num_groups < 1 or input.shape[1] % num_groups:
        raise error(
            f"group_norm: input {fmt_shape(input.shape)} needs a channel dim 1 that"
            f" {num_groups} groups divide"
        )
    n, c = input.shape[:2]
    per_group = c // num_groups * prod(input.shape[2:])
    flat = input.reshape(n, num_groups, per_group)
    y = layer_norm(flat, [per_group], eps=eps).reshape(list(input.shape))
    if weight is not None:
        y = y * per_channel(weight, input.ndim)
    if bias is not None:
        y = y + per_channel(bias, input.ndim)
    return y


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Each sample's channels normalised on their own (`group_norm` with a group per
    channel), as PyTorch's `instance_norm` with `use_input_stats` and no running
    statistics (gradfuse keeps none for it: an error says so)."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise error(
            "instance_norm: running statistics are not supported (track_running_stats=False,"
            " use_input_stats=True)"
        )
    channels = input.shape[1] if input.ndim >= 2 else 0
    return group_norm(input, max(channels, 1), weight, bias, eps)


def normalize(
    input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: object = None
) -> Tensor:
    """`input` divided by its `p`-norm along `dim`, at least `eps`, as PyTorch's
    `F.normalize` (p 1, 2 or inf). `F.normalize(embeddings, dim=-1)`"""
    if out is not None:
        raise error("normalize: out= is not supported (gradfuse's tensors are values)")
    return input / input.norm(p, dim, keepdim=True).clamp(min=eps)


__all__ = ["group_norm", "instance_norm", "normalize"]
