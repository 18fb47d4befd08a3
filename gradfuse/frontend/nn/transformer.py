"""`MultiheadAttention`, `TransformerEncoderLayer` and `TransformerEncoder`, as in PyTorch.

Constructor arguments, submodule names and state_dict layouts are PyTorch's, so a
PyTorch model's `state_dict()` loads into these and computes the same outputs:

    layer = TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    sorted(layer.state_dict())[:2]    # ['linear1.bias', 'linear1.weight']
    y = layer(x)                      # x: [N, L, 64]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend import functional as F
from gradfuse.frontend.nn.activation import Dropout
from gradfuse.frontend.nn.layers import Linear, ModuleList, uniform
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.normalization import LayerNorm
from gradfuse.frontend.nn.options import device_and_dtype, only
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor

_MASKED = -1e30  # added to the scores of masked positions (PyTorch adds -inf)

Mask = Tensor | np.ndarray | None


def _additive(mask: Mask, what: str) -> Tensor | None:
    """A float mask to add to attention scores: boolean True (masked) becomes -1e30."""
    if mask is None:
        return None
    if isinstance(mask, Tensor):
        return mask.float() * _MASKED if mask.dtype == np.bool_ else mask
    arr = np.asarray(mask)
    if arr.dtype == np.bool_:
        arr = np.where(arr, _MASKED, 0.0)
    if not np.issubdtype(arr.dtype, np.number):
        raise error(f"MultiheadAttention: {what} must be boolean or float, got {arr.dtype}")
    return F.constant(arr.astype(np.float32))


def _like(mask: Tensor | None, scores: Tensor) -> Tensor | None:
    """`mask` in the dtype of `scores` (a float32 mask added to a float64 model's)."""
    return mask if mask is None or mask.dtype == scores.dtype else mask.to(scores.dtype)


def _check_heads(what: str, dim_name: str, dim: int, heads_name: str, heads: int) -> None:
    """Raises at the user's line unless `dim` is a positive multiple of `heads` > 0."""
    if dim <= 0 or heads <= 0:
        raise error(f"{what}: {dim_name} {dim} and {heads_name} {heads} must be positive")
    if dim % heads:
        raise error(
            f"{what}: {dim_name} {dim} is not divisible by {heads_name} {heads}"
            f" (the attention's embed_dim must be a multiple of num_heads {heads})"
        )


def _check_input(what: str, x: Tensor, embed_dim: int, batch_first: bool) -> None:
    """Raises at the user's line unless `x` is [L, E] or a batch in the module's layout."""
    if x.ndim not in (2, 3) or x.shape[-1] != embed_dim:
        batch = f"[N, L, {embed_dim}]" if batch_first else f"[L, N, {embed_dim}]"
        raise error(
            f"{what}: expected an input of shape [L, {embed_dim}] or a batch {batch}"
            f" (batch_first={batch_first}), got {fmt_shape(x.shape)}"
        )


class MultiheadAttention(Module):
    """Multi-head scaled dot-product attention with PyTorch's parameters and semantics.

    `in_proj_weight` [3E, E] (xavier-uniform), `in_proj_bias` [3E] (zeros), `out_proj`
    a `Linear(E, E)` with zero bias. `forward` returns `(output, weights or None)`:
    `out, _ = MultiheadAttention(64, 4, batch_first=True)(x, x, x, need_weights=False)`
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        only("MultiheadAttention", "add_bias_kv", add_bias_kv, False)
        only("MultiheadAttention", "add_zero_attn", add_zero_attn, False)
        only("MultiheadAttention", "kdim", kdim, None, embed_dim)
        only("MultiheadAttention", "vdim", vdim, None, embed_dim)
        device_and_dtype("MultiheadAttention", device, dtype)
        _check_heads("MultiheadAttention", "embed_dim", embed_dim, "num_heads", num_heads)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))
        self.in_proj_weight = uniform(bound, (3 * embed_dim, embed_dim))
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, np.float32)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        if self.out_proj.bias is not None:
            self.out_proj.bias.data[...] = 0.0

    def _project(self, x: Tensor, part: int) -> Tensor:
        e = self.embed_dim
        b = self.in_proj_bias
        w = self.in_proj_weight[part * e : (part + 1) * e]
        return F.linear(x, w, b[part * e : (part + 1) * e] if b is not None else None)

    def _heads(self, x: Tensor) -> Tensor:
        n, length, _ = x.shape
        return x.reshape(n, length, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Mask = None,
        need_weights: bool = True,
        attn_mask: Mask = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_input(f"MultiheadAttention {name}", t, self.embed_dim, self.batch_first)
        if not query.ndim == key.ndim == value.ndim:
            raise error("MultiheadAttention: query, key and value must have the same rank")
        same = query is key and key is value
        batched = query.ndim == 3

        def to_nle(t: Tensor) -> Tensor:
            if not batched:
                return t.reshape(1, *t.shape)
            return t if self.batch_first else t.transpose(0, 1)

        q_in, k_in, v_in = to_nle(query), to_nle(key), to_nle(value)
        n, length, e = q_in.shape
        if same:
            qkv = F.linear(q_in, self.in_proj_weight, self.in_proj_bias)
            q, k, v = qkv[..., :e], qkv[..., e : 2 * e], qkv[..., 2 * e :]
        else:
            q, k, v = self._project(q_in, 0), self._project(k_in, 1), self._project(v_in, 2)
        source = k.shape[1]
        if is_causal and attn_mask is None:
            attn_mask = np.triu(np.ones((length, source), bool), 1)
        scores = self._heads(q * (1.0 / math.sqrt(self.head_dim))) @ self._heads(k).transpose(
            -2, -1
        )
        mask = _like(_additive(attn_mask, "attn_mask"), scores)
        if mask is not None:
            if mask.ndim == 3:
                mask = mask.reshape(n, self.num_heads, length, source)
            scores = scores + mask
        padding = _like(_additive(key_padding_mask, "key_padding_mask"), scores)
        if padding is not None:
            scores = scores + padding.reshape(padding.shape[0] if batched else 1, 1, 1, source)
        attn = F.dropout(scores.softmax(-1), self.dropout, self.training)
        out = (attn @ self._heads(v)).permute(0, 2, 1, 3).reshape(n, length, e)
        out = self.out_proj(out)
        if not batched:
            out = out.reshape(length, e)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        weights = attn.mean(1) if average_attn_weights else attn
        return out, weights if batched else weights.reshape(*weights.shape[1:])

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": Tensor.relu, "gelu": F.gelu}


class TransformerLayer(Module):
    """What PyTorch's encoder and decoder layers share: their arguments, and their
    submodules in PyTorch's order for `BLOCKS` residual blocks (2: `self_attn`; 3: and
    `multihead_attn`), `linear1`, `dropout`, `linear2`, `norm1`..., `dropout1`...;
    the self-attention block and the feed-forward block."""

    BLOCKS = 2

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        what = type(self).__name__
        device_and_dtype(what, device, dtype)
        if isinstance(activation, str) and activation not in _ACTIVATIONS:
            raise error(f"{what}: activation should be relu or gelu, not {activation!r}")
        _check_heads(what, "d_model", d_model, "nhead", nhead)
        self.d_model = d_model
        attention = {"dropout": dropout, "bias": bias, "batch_first": batch_first}
        self.self_attn = MultiheadAttention(d_model, nhead, **attention)
        if self.BLOCKS == 3:
            self.multihead_attn = MultiheadAttention(d_model, nhead, **attention)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        for k in range(1, self.BLOCKS + 1):
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for k in range(1, self.BLOCKS + 1):
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation: Any = (
            _ACTIVATIONS[activation] if isinstance(activation, str) else activation
        )

    def _sa_block(self, x: Tensor, mask: Mask, padding: Mask, is_causal: bool) -> Tensor:
        out, _ = self.self_attn(
            x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )  # fmt: skip
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        last = getattr(self, f"dropout{self.BLOCKS}")
        return last(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(TransformerLayer):
    """Self-attention and a feed-forward block, each with a residual and a LayerNorm.

    PyTorch's arguments, submodules (`self_attn`, `linear1`, `dropout`, `linear2`,
    `norm1`, `norm2`, `dropout1`, `dropout2`) and post-norm default (`norm_first=False`).
    `TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)(x)`
    """

    def forward(
        self,
        src: Tensor,
        src_mask: Mask = None,
        src_key_padding_mask: Mask = None,
        is_causal: bool = False,
    ) -> Tensor:
        _check_input("TransformerEncoderLayer", src, self.d_model, self.self_attn.batch_first)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


def stack_layers(stack: Module, layer: Module, num_layers: int, norm: Module | None) -> None:
    """`stack.layers`: `num_layers` deep copies of `layer` (`layers.0`, ...); `stack.norm`."""
    if num_layers < 1:
        raise error(f"{type(stack).__name__}: num_layers must be >= 1, got {num_layers}")
    stack.layers = ModuleList(copy.deepcopy(layer) for _ in range(num_layers))
    stack.num_layers = num_layers
    stack.norm = norm


class TransformerEncoder(Module):
    """`num_layers` deep copies of `encoder_layer` (`layers.0`, `layers.1`, ...), then `norm`.

    `TransformerEncoder(TransformerEncoderLayer(64, 4, batch_first=True), num_layers=2)(x)`
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        stack_layers(self, encoder_layer, num_layers, norm)

    def forward(
        self,
        src: Tensor,
        mask: Mask = None,
        src_key_padding_mask: Mask = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask, bool(is_causal))
        return self.norm(x) if self.norm is not None else x
