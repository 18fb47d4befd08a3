"""`TransformerDecoderLayer`, `TransformerDecoder` and `Transformer`, as in PyTorch:
constructor arguments, submodule names and state_dict layouts are PyTorch's, so a
PyTorch `nn.Transformer`'s `state_dict()` loads and computes the same outputs:

    model = Transformer(d_model=64, nhead=4, num_encoder_layers=2,
                        num_decoder_layers=2, dim_feedforward=128, batch_first=True)
    mask = Transformer.generate_square_subsequent_mask(tgt.shape[1])
    out = model(src, tgt, tgt_mask=mask)      # [N, T, 64]

Composites of the encoder's modules (transformer.py): each block is attention or the
feed-forward, with its dropout, a residual and a LayerNorm (after, or before with
`norm_first`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gradfuse.frontend import functional as F
from gradfuse.frontend.nn.init import xavier_uniform_
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.normalization import LayerNorm
from gradfuse.frontend.nn.options import device_and_dtype
from gradfuse.frontend.nn.transformer import (
    Mask,
    TransformerEncoder,
    TransformerEncoderLayer,
    TransformerLayer,
    _check_input,
    stack_layers,
)
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


class TransformerDecoderLayer(TransformerLayer):
    """Self-attention, attention to the encoder's output (`memory`) and a feed-forward
    block, each with a residual and a LayerNorm. PyTorch's arguments and submodules
    (`self_attn`, `multihead_attn`, `linear1`, `dropout`, `linear2`, `norm1`-`norm3`,
    `dropout1`-`dropout3`). `TransformerDecoderLayer(16, 2, 32, batch_first=True)(t, m)`
    """

    BLOCKS = 3

    def _mha_block(
        self, x: Tensor, memory: Tensor, mask: Mask, padding: Mask, is_causal: bool
    ) -> Tensor:
        out, _ = self.multihead_attn(
            x, memory, memory, attn_mask=mask, key_padding_mask=padding, need_weights=False,
            is_causal=is_causal,
        )  # fmt: skip
        return self.dropout2(out)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Mask = None,
        memory_mask: Mask = None,
        tgt_key_padding_mask: Mask = None,
        memory_key_padding_mask: Mask = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch_first = self.self_attn.batch_first
        _check_input("TransformerDecoderLayer tgt", tgt, self.d_model, batch_first)
        _check_input("TransformerDecoderLayer memory", memory, self.d_model, batch_first)
        x = tgt
        sa = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        mha = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), *sa)
            x = x + self._mha_block(self.norm2(x), memory, *mha)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, *sa))
        x = self.norm2(x + self._mha_block(x, memory, *mha))
        return self.norm3(x + self._ff_block(x))


class TransformerDecoder(Module):
    """`num_layers` deep copies of `decoder_layer` (`layers.0`, ...), then `norm`.

    `TransformerDecoder(TransformerDecoderLayer(64, 4, batch_first=True), 2)(tgt, memory)`
    """

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):  # fmt: skip
        super().__init__()
        stack_layers(self, decoder_layer, num_layers, norm)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Mask = None,
        memory_mask: Mask = None,
        tgt_key_padding_mask: Mask = None,
        memory_key_padding_mask: Mask = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                memory_key_padding_mask, bool(tgt_is_causal), memory_is_causal,
            )  # fmt: skip
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """PyTorch's `nn.Transformer`: a `TransformerEncoder` and a `TransformerDecoder`,
    each ending in a LayerNorm (`encoder.norm`, `decoder.norm`), the weight matrices
    drawn xavier-uniform. `Transformer(64, 4, 2, 2, 128, batch_first=True)(src, tgt)`"""

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        device_and_dtype("Transformer", device, dtype)
        layer = {
            "dim_feedforward": dim_feedforward, "dropout": dropout, "activation": activation,
            "layer_norm_eps": layer_norm_eps, "batch_first": batch_first,
            "norm_first": norm_first, "bias": bias,
        }  # fmt: skip
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **layer),
            num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **layer),
            num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        for p in self.parameters():
            if p.dim() > 1:
                xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Mask = None,
        tgt_mask: Mask = None,
        memory_mask: Mask = None,
        src_key_padding_mask: Mask = None,
        tgt_key_padding_mask: Mask = None,
        memory_key_padding_mask: Mask = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise error(
                f"Transformer: the batch sizes of src ({src.shape[batch]}) and tgt"
                f" ({tgt.shape[batch]}) must be equal"
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
            is_causal=src_is_causal,
        )  # fmt: skip
        return self.decoder(
            tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:  # fmt: skip
        """The causal mask: -inf above the diagonal, 0 elsewhere (a float [sz, sz])."""
        return F.constant(np.triu(np.full((sz, sz), -np.inf, np.float32), 1))
