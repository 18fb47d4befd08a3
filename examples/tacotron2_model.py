"""Tacotron 2 in gradfuse: NVIDIA's model.py (github.com/NVIDIA/tacotron2), the model of
../shared/reference/tacotron2_kernel_profile.txt; `tacotron2.py` trains it.

The module tree and `state_dict` names are NVIDIA's (`embedding.weight`,
`encoder.lstm.weight_ih_l0_reverse`, `decoder.attention_rnn.weight_ih`, ...: 60
parameter tensors, 28,193,153 values with the default `HParams`), so its checkpoints
load with `load_state_dict`. The code follows NVIDIA's line by line, except where a
traced program with static shapes needs otherwise:
- the teacher-forced decoder is one `gradfuse.steps` loop over the frames (a `tg.for`,
  differentiated by a reverse loop, never unrolled); the tensors it carries from frame
  to frame are NVIDIA's `self.attention_hidden` and the rest, as `s.attention_hidden`;
- the lengths are tensors fed each step (they vary; nothing is recompiled): the
  encoder's LSTM takes a packed batch (`gradfuse.nn.utils.rnn`, masks), the attention
  masks the padded characters, `parse_output` the frames after each mel length;
- the dropout rates are fields of `HParams`, so that tests can turn them off (NVIDIA's
  prenet dropout is always on, also at inference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import gradfuse
from gradfuse import nn
from gradfuse.nn import functional as F


@dataclass(frozen=True)
class HParams:
    """NVIDIA's hparams.py (the model's part), plus the dropout rates as fields."""

    n_symbols: int = 148
    symbols_embedding_dim: int = 512
    encoder_kernel_size: int = 5
    encoder_n_convolutions: int = 3
    encoder_embedding_dim: int = 512
    n_mel_channels: int = 80
    n_frames_per_step: int = 1
    attention_rnn_dim: int = 1024
    decoder_rnn_dim: int = 1024
    prenet_dim: int = 256
    attention_dim: int = 128
    attention_location_n_filters: int = 32
    attention_location_kernel_size: int = 31
    postnet_embedding_dim: int = 512
    postnet_kernel_size: int = 5
    postnet_n_convolutions: int = 5
    p_attention_dropout: float = 0.1
    p_decoder_dropout: float = 0.1
    p_prenet_dropout: float = 0.5  # NVIDIA: always on, also at inference
    p_conv_dropout: float = 0.5  # encoder and postnet convolutions (while training)


SMALL = HParams(
    n_symbols=20, symbols_embedding_dim=32, encoder_n_convolutions=2, encoder_embedding_dim=32,
    n_mel_channels=10, attention_rnn_dim=48, decoder_rnn_dim=48, prenet_dim=24,
    attention_dim=16, attention_location_n_filters=4, attention_location_kernel_size=7,
    postnet_embedding_dim=32, postnet_n_convolutions=3,
)  # fmt: skip
GAINS = {"linear": 1.0, "relu": math.sqrt(2.0), "tanh": 5.0 / 3.0, "sigmoid": 1.0}


def xavier_uniform_(weight: nn.Parameter, gain: str) -> None:
    """torch.nn.init.xavier_uniform_(weight, calculate_gain(gain)), in place."""
    shape = weight.data.shape
    field = math.prod(shape[2:])
    bound = GAINS[gain] * math.sqrt(6.0 / (shape[1] * field + shape[0] * field))
    weight.data[...] = np.random.default_rng(weight.data.size).uniform(-bound, bound, shape)


class LinearNorm(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, w_init_gain="linear"):
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim, bias=bias)
        xavier_uniform_(self.linear_layer.weight, w_init_gain)

    def forward(self, x):
        return self.linear_layer(x)


class ConvNorm(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=1, stride=1, padding=None,
                 dilation=1, bias=True, w_init_gain="linear"):  # fmt: skip
        super().__init__()
        if padding is None:
            padding = int(dilation * (kernel_size - 1) / 2)
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size=kernel_size, stride=stride,
                              padding=padding, dilation=dilation, bias=bias)  # fmt: skip
        xavier_uniform_(self.conv.weight, w_init_gain)

    def forward(self, signal):
        return self.conv(signal)


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super().__init__()
        padding = int((attention_kernel_size - 1) / 2)
        self.location_conv = ConvNorm(2, attention_n_filters, kernel_size=attention_kernel_size,
                                      padding=padding, bias=False, stride=1, dilation=1)  # fmt: skip
        self.location_dense = LinearNorm(attention_n_filters, attention_dim, bias=False,
                                         w_init_gain="tanh")  # fmt: skip

    def forward(self, attention_weights_cat):
        processed_attention = self.location_conv(attention_weights_cat)
        processed_attention = processed_attention.transpose(1, 2)
        return self.location_dense(processed_attention)


class Attention(nn.Module):
    def __init__(self, attention_rnn_dim, embedding_dim, attention_dim,
                 attention_location_n_filters, attention_location_kernel_size):  # fmt: skip
        super().__init__()
        self.query_layer = LinearNorm(
            attention_rnn_dim, attention_dim, bias=False, w_init_gain="tanh"
        )
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(attention_location_n_filters,
                                            attention_location_kernel_size, attention_dim)  # fmt: skip
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query, processed_memory, attention_weights_cat):
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(F.tanh(processed_query + processed_attention_weights + processed_memory))
        return energies.squeeze(-1)

    def forward(
        self, attention_hidden_state, memory, processed_memory, attention_weights_cat, mask
    ):
        alignment = self.get_alignment_energies(
            attention_hidden_state, processed_memory, attention_weights_cat
        )
        alignment = alignment.masked_fill(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = (attention_weights.unsqueeze(1) @ memory).squeeze(1)  # torch.bmm
        return attention_context, attention_weights


class Prenet(nn.Module):
    def __init__(self, in_dim, sizes, p=0.5):
        super().__init__()
        in_sizes = [in_dim] + sizes[:-1]
        self.layers = nn.ModuleList(
            [
                LinearNorm(in_size, out_size, bias=False)
                for (in_size, out_size) in zip(in_sizes, sizes)
            ]
        )
        self.p = p

    def forward(self, x):
        for linear in self.layers:
            x = F.dropout(F.relu(linear(x)), p=self.p, training=True)
        return x


class Postnet(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        self.p = hp.p_conv_dropout
        k, e, mel = hp.postnet_kernel_size, hp.postnet_embedding_dim, hp.n_mel_channels
        sizes = [mel] + [e] * (hp.postnet_n_convolutions - 1) + [mel]
        self.convolutions = nn.ModuleList()
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            gain = "linear" if i == hp.postnet_n_convolutions - 1 else "tanh"
            self.convolutions.append(nn.Sequential(
                ConvNorm(a, b, kernel_size=k, stride=1, padding=int((k - 1) / 2), dilation=1,
                         w_init_gain=gain),
                nn.BatchNorm1d(b),
            ))  # fmt: skip

    def forward(self, x):
        for i in range(len(self.convolutions) - 1):
            x = F.dropout(F.tanh(self.convolutions[i](x)), self.p, self.training)
        return F.dropout(self.convolutions[-1](x), self.p, self.training)


class Encoder(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        self.p, e, k = hp.p_conv_dropout, hp.encoder_embedding_dim, hp.encoder_kernel_size
        self.convolutions = nn.ModuleList([
            nn.Sequential(
                ConvNorm(e, e, kernel_size=k, stride=1, padding=int((k - 1) / 2), dilation=1,
                         w_init_gain="relu"),
                nn.BatchNorm1d(e),
            )
            for _ in range(hp.encoder_n_convolutions)
        ])  # fmt: skip
        self.lstm = nn.LSTM(e, int(e / 2), 1, batch_first=True, bidirectional=True)

    def forward(self, x, input_lengths):
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), self.p, self.training)
        x = x.transpose(1, 2)
        x = nn.utils.rnn.pack_padded_sequence(x, input_lengths, batch_first=True)
        outputs, _ = self.lstm(x)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True)
        return outputs


def get_pad_from_lengths(lengths, max_len):
    """[B, max_len]: True after each length (NVIDIA's `~get_mask_from_lengths(lengths)`)."""
    ids = gradfuse.constant(np.arange(max_len, dtype=np.float32)).unsqueeze(0)
    return ids >= lengths.unsqueeze(1)


class Decoder(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        self.n_mel_channels = hp.n_mel_channels
        self.n_frames_per_step = hp.n_frames_per_step
        self.encoder_embedding_dim = hp.encoder_embedding_dim
        self.attention_rnn_dim = hp.attention_rnn_dim
        self.decoder_rnn_dim = hp.decoder_rnn_dim
        self.p_attention_dropout = hp.p_attention_dropout
        self.p_decoder_dropout = hp.p_decoder_dropout
        mel, e = hp.n_mel_channels * hp.n_frames_per_step, hp.encoder_embedding_dim
        self.prenet = Prenet(mel, [hp.prenet_dim, hp.prenet_dim], hp.p_prenet_dropout)
        self.attention_rnn = nn.LSTMCell(hp.prenet_dim + e, hp.attention_rnn_dim)
        self.attention_layer = Attention(hp.attention_rnn_dim, e, hp.attention_dim,
                                         hp.attention_location_n_filters,
                                         hp.attention_location_kernel_size)  # fmt: skip
        self.decoder_rnn = nn.LSTMCell(hp.attention_rnn_dim + e, hp.decoder_rnn_dim, 1)
        self.linear_projection = LinearNorm(hp.decoder_rnn_dim + e, mel)
        self.gate_layer = LinearNorm(hp.decoder_rnn_dim + e, 1, bias=True, w_init_gain="sigmoid")

    def get_go_frame(self, memory):
        return gradfuse.constant(np.zeros((memory.size(0), self.n_mel_channels), np.float32))

    def initial_states(self, memory):
        """NVIDIA's `initialize_decoder_states`: the tensors the frame loop carries."""
        b, t = memory.size(0), memory.size(1)

        def zeros(*shape):
            return gradfuse.constant(np.zeros(shape, np.float32))

        return dict(
            attention_hidden=zeros(b, self.attention_rnn_dim),
            attention_cell=zeros(b, self.attention_rnn_dim),
            decoder_hidden=zeros(b, self.decoder_rnn_dim),
            decoder_cell=zeros(b, self.decoder_rnn_dim),
            attention_weights=zeros(b, t),
            attention_weights_cum=zeros(b, t),
            attention_context=zeros(b, self.encoder_embedding_dim),
        )

    def parse_decoder_inputs(self, decoder_inputs):
        # (B, n_mel_channels, T_out) -> (B, T_out, n_mel_channels)
        decoder_inputs = decoder_inputs.transpose(1, 2)
        decoder_inputs = decoder_inputs.view(
            decoder_inputs.size(0), int(decoder_inputs.size(1) / self.n_frames_per_step), -1
        )
        # (B, T_out, n_mel_channels) -> (T_out, B, n_mel_channels)
        return decoder_inputs.transpose(0, 1)

    def parse_decoder_outputs(self, mel_outputs, gate_outputs, alignments):
        # stacked over the frames: (T_out, B, ...) -> (B, T_out, ...)
        alignments = alignments.transpose(0, 1)
        gate_outputs = gate_outputs.transpose(0, 1)
        mel_outputs = mel_outputs.transpose(0, 1)
        mel_outputs = mel_outputs.view(mel_outputs.size(0), -1, self.n_mel_channels)
        # (B, T_out, n_mel_channels) -> (B, n_mel_channels, T_out)
        mel_outputs = mel_outputs.transpose(1, 2)
        return mel_outputs, gate_outputs, alignments

    def decode(self, decoder_input, s, memory, processed_memory, mask):
        """One frame; `s` holds what NVIDIA keeps in `self` (the loop's carried tensors)."""
        cell_input = gradfuse.cat((decoder_input, s.attention_context), -1)
        s.attention_hidden, s.attention_cell = self.attention_rnn(
            cell_input, (s.attention_hidden, s.attention_cell)
        )
        s.attention_hidden = F.dropout(s.attention_hidden, self.p_attention_dropout, self.training)
        attention_weights_cat = gradfuse.cat(
            (s.attention_weights.unsqueeze(1), s.attention_weights_cum.unsqueeze(1)), dim=1
        )
        s.attention_context, s.attention_weights = self.attention_layer(
            s.attention_hidden, memory, processed_memory, attention_weights_cat, mask
        )
        s.attention_weights_cum = s.attention_weights_cum + s.attention_weights
        decoder_input = gradfuse.cat((s.attention_hidden, s.attention_context), -1)
        s.decoder_hidden, s.decoder_cell = self.decoder_rnn(
            decoder_input, (s.decoder_hidden, s.decoder_cell)
        )
        s.decoder_hidden = F.dropout(s.decoder_hidden, self.p_decoder_dropout, self.training)
        decoder_hidden_attention_context = gradfuse.cat(
            (s.decoder_hidden, s.attention_context), dim=1
        )
        decoder_output = self.linear_projection(decoder_hidden_attention_context)
        gate_prediction = self.gate_layer(decoder_hidden_attention_context)
        return decoder_output, gate_prediction, s.attention_weights

    def forward(self, memory, decoder_inputs, memory_lengths):
        """Teacher forcing: memory [B, T_in, E], decoder_inputs [B, n_mel, T_out] ->
        mel [B, n_mel, T_out], gate [B, T_out], alignments [B, T_out, T_in]."""
        decoder_input = self.get_go_frame(memory).unsqueeze(0)
        decoder_inputs = self.parse_decoder_inputs(decoder_inputs)
        decoder_inputs = gradfuse.cat((decoder_input, decoder_inputs), dim=0)
        decoder_inputs = self.prenet(decoder_inputs)
        processed_memory = self.attention_layer.memory_layer(memory)
        mask = get_pad_from_lengths(memory_lengths, memory.size(1))
        frames = decoder_inputs[:-1]  # frame t reads the target of frame t - 1 (the go frame)
        s = gradfuse.steps(frames.size(0), **self.initial_states(memory))
        for t in s:  # one tg.for over the frames
            mel_output, gate_output, attention_weights = self.decode(
                frames[t], s, memory, processed_memory, mask
            )
            s.collect(mel=mel_output, gate=gate_output.squeeze(1), alignment=attention_weights)
        return self.parse_decoder_outputs(s.mel, s.gate, s.alignment)


class Tacotron2(nn.Module):
    def __init__(self, hp: HParams):
        super().__init__()
        self.n_mel_channels = hp.n_mel_channels
        self.embedding = nn.Embedding(hp.n_symbols, hp.symbols_embedding_dim)
        std = math.sqrt(2.0 / (hp.n_symbols + hp.symbols_embedding_dim))
        val = math.sqrt(3.0) * std  # uniform bounds for std
        shape = self.embedding.weight.data.shape
        self.embedding.weight.data[...] = np.random.default_rng(0).uniform(-val, val, shape)
        self.encoder = Encoder(hp)
        self.decoder = Decoder(hp)
        self.postnet = Postnet(hp)

    def parse_output(self, outputs, output_lengths):
        mask = get_pad_from_lengths(output_lengths, outputs[0].size(2))  # [B, T_out]
        mels = mask.unsqueeze(1).broadcast_to(outputs[0].shape)
        outputs[0] = outputs[0].masked_fill(mels, 0.0)
        outputs[1] = outputs[1].masked_fill(mels, 0.0)
        outputs[2] = outputs[2].masked_fill(mask, 1e3)  # gate energies
        return outputs

    def forward(self, inputs):
        text_inputs, text_lengths, mels, max_len, output_lengths = inputs
        embedded_inputs = self.embedding(text_inputs).transpose(1, 2)
        encoder_outputs = self.encoder(embedded_inputs, text_lengths)
        mel_outputs, gate_outputs, alignments = self.decoder(
            encoder_outputs, mels, memory_lengths=text_lengths
        )
        mel_outputs_postnet = self.postnet(mel_outputs)
        mel_outputs_postnet = mel_outputs + mel_outputs_postnet
        return self.parse_output(
            [mel_outputs, mel_outputs_postnet, gate_outputs, alignments], output_lengths
        )


class Tacotron2Loss(nn.Module):
    def forward(self, model_output, targets):
        mel_target, gate_target = targets[0], targets[1]
        gate_target = gate_target.view(-1, 1)
        mel_out, mel_out_postnet, gate_out, _ = model_output
        gate_out = gate_out.view(-1, 1)
        mel_loss = nn.MSELoss()(mel_out, mel_target) + nn.MSELoss()(mel_out_postnet, mel_target)
        gate_loss = nn.BCEWithLogitsLoss()(gate_out, gate_target)
        return mel_loss + gate_loss
