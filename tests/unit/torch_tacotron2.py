"""NVIDIA's Tacotron 2 (github.com/NVIDIA/tacotron2: model.py, layers.py, loss_function.py,
utils.py and train.py's inner step) in plain PyTorch, with NVIDIA's module tree, state_dict
names and init: the reference the Tacotron 2 tests compare gradfuse with. Import it after
`pytest.importorskip("torch")`; it runs on the CPU (NVIDIA's `.cuda()` calls are left out).

    model = Tacotron2(hparams())                    # NVIDIA's sizes (28,193,153 values)
    small = Tacotron2(hparams(symbols_embedding_dim=32, encoder_embedding_dim=32, ...))
    small = small.double()                          # a float64 run
    rng = np.random.default_rng(0)
    x, y = to_torch(synthetic_batch(rng, 2, 5, 8, n_mel_channels=10, n_symbols=148))
    losses = train(small, (x, y), steps=3)

Differences from NVIDIA, all off by default: the dropout probabilities NVIDIA hard-codes
(encoder convolutions, prenet, postnet: 0.5) are hparams (`p_encoder_dropout`,
`p_prenet_dropout`, `p_postnet_dropout`) so a test can set them to 0.0 and get a
deterministic model. Note `model.eval()` turns off the encoder, postnet, attention and decoder
dropout, and makes BatchNorm use its running statistics, but NVIDIA's prenet dropout is always
on (`training=True`, also at inference): set `p_prenet_dropout=0.0` for that. Only
`n_frames_per_step=1` and teacher-forced decoding (`forward`) are provided, no `inference()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import sqrt

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def get_mask_from_lengths(lengths):
    """utils.py: True where a position is within its sequence's length."""
    max_len = torch.max(lengths).item()
    ids = torch.arange(0, max_len, device=lengths.device)
    mask = (ids < lengths.unsqueeze(1)).bool()
    return mask


class LinearNorm(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, w_init_gain="linear"):
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim, bias=bias)
        nn.init.xavier_uniform_(self.linear_layer.weight, gain=nn.init.calculate_gain(w_init_gain))

    def forward(self, x):
        return self.linear_layer(x)


class ConvNorm(nn.Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size=1,
        stride=1,
        padding=None,
        dilation=1,
        bias=True,
        w_init_gain="linear",
    ):
        super().__init__()
        if padding is None:
            assert kernel_size % 2 == 1
            padding = int(dilation * (kernel_size - 1) / 2)
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size, stride, padding, dilation, bias=bias
        )
        nn.init.xavier_uniform_(self.conv.weight, gain=nn.init.calculate_gain(w_init_gain))

    def forward(self, signal):
        return self.conv(signal)


class LocationLayer(nn.Module):
    def __init__(self, attention_n_filters, attention_kernel_size, attention_dim):
        super().__init__()
        padding = int((attention_kernel_size - 1) / 2)
        self.location_conv = ConvNorm(
            2, attention_n_filters, attention_kernel_size, padding=padding, bias=False
        )
        self.location_dense = LinearNorm(
            attention_n_filters, attention_dim, bias=False, w_init_gain="tanh"
        )

    def forward(self, attention_weights_cat):
        processed_attention = self.location_conv(attention_weights_cat)
        processed_attention = processed_attention.transpose(1, 2)
        return self.location_dense(processed_attention)


class Attention(nn.Module):
    def __init__(
        self,
        attention_rnn_dim,
        embedding_dim,
        attention_dim,
        attention_location_n_filters,
        attention_location_kernel_size,
    ):
        super().__init__()
        self.query_layer = LinearNorm(
            attention_rnn_dim, attention_dim, bias=False, w_init_gain="tanh"
        )
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(
            attention_location_n_filters, attention_location_kernel_size, attention_dim
        )
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query, processed_memory, attention_weights_cat):
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(
            torch.tanh(processed_query + processed_attention_weights + processed_memory)
        )
        return energies.squeeze(-1)

    def forward(
        self, attention_hidden_state, memory, processed_memory, attention_weights_cat, mask
    ):
        alignment = self.get_alignment_energies(
            attention_hidden_state, processed_memory, attention_weights_cat
        )
        if mask is not None:
            alignment.data.masked_fill_(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory)
        attention_context = attention_context.squeeze(1)
        return attention_context, attention_weights


class Prenet(nn.Module):
    """Dropout is always on (NVIDIA's `training=True`); `p` is the knob to turn it off."""

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
    def __init__(self, hparams):
        super().__init__()
        self.p = hparams.p_postnet_dropout
        n_mel, dim = hparams.n_mel_channels, hparams.postnet_embedding_dim
        k = hparams.postnet_kernel_size
        pad = int((k - 1) / 2)
        n = hparams.postnet_n_convolutions
        # NVIDIA's first (n_mel -> dim), middle (dim -> dim) and last (dim -> n_mel) layers
        layers = [(n_mel, dim, "tanh")] + [(dim, dim, "tanh")] * (n - 2) + [(dim, n_mel, "linear")]
        self.convolutions = nn.ModuleList()
        for cin, cout, gain in layers:
            self.convolutions.append(
                nn.Sequential(
                    ConvNorm(cin, cout, k, stride=1, padding=pad, dilation=1, w_init_gain=gain),
                    nn.BatchNorm1d(cout),
                )
            )

    def forward(self, x):
        for i in range(len(self.convolutions) - 1):
            x = F.dropout(torch.tanh(self.convolutions[i](x)), self.p, self.training)
        x = F.dropout(self.convolutions[-1](x), self.p, self.training)
        return x


class Encoder(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.p = hparams.p_encoder_dropout
        dim, k = hparams.encoder_embedding_dim, hparams.encoder_kernel_size
        convolutions = []
        for _ in range(hparams.encoder_n_convolutions):
            conv_layer = nn.Sequential(
                ConvNorm(dim, dim, k, stride=1, padding=int((k - 1) / 2), w_init_gain="relu"),
                nn.BatchNorm1d(dim),
            )
            convolutions.append(conv_layer)
        self.convolutions = nn.ModuleList(convolutions)
        self.lstm = nn.LSTM(dim, int(dim / 2), 1, batch_first=True, bidirectional=True)

    def forward(self, x, input_lengths):
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), self.p, self.training)
        x = x.transpose(1, 2)
        # pytorch tensor are not reversible, hence the conversion
        input_lengths = input_lengths.cpu().numpy()
        x = nn.utils.rnn.pack_padded_sequence(x, input_lengths, batch_first=True)
        self.lstm.flatten_parameters()
        outputs, _ = self.lstm(x)
        # pads to max(input_lengths), which NVIDIA's batches always make the input's width
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True)
        return outputs


class Decoder(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        assert hparams.n_frames_per_step == 1, "only n_frames_per_step=1 is supported"
        self.n_mel_channels = hparams.n_mel_channels
        self.n_frames_per_step = hparams.n_frames_per_step
        self.encoder_embedding_dim = hparams.encoder_embedding_dim
        self.attention_rnn_dim = hparams.attention_rnn_dim
        self.decoder_rnn_dim = hparams.decoder_rnn_dim
        self.prenet_dim = hparams.prenet_dim
        self.max_decoder_steps = hparams.max_decoder_steps
        self.gate_threshold = hparams.gate_threshold
        self.p_attention_dropout = hparams.p_attention_dropout
        self.p_decoder_dropout = hparams.p_decoder_dropout
        h, emb = hparams, hparams.encoder_embedding_dim

        self.prenet = Prenet(
            h.n_mel_channels * h.n_frames_per_step,
            [h.prenet_dim, h.prenet_dim],
            p=h.p_prenet_dropout,
        )
        self.attention_rnn = nn.LSTMCell(h.prenet_dim + emb, h.attention_rnn_dim)
        self.attention_layer = Attention(
            h.attention_rnn_dim,
            emb,
            h.attention_dim,
            h.attention_location_n_filters,
            h.attention_location_kernel_size,
        )
        self.decoder_rnn = nn.LSTMCell(h.attention_rnn_dim + emb, h.decoder_rnn_dim, 1)
        self.linear_projection = LinearNorm(
            h.decoder_rnn_dim + emb, h.n_mel_channels * h.n_frames_per_step
        )
        self.gate_layer = LinearNorm(h.decoder_rnn_dim + emb, 1, bias=True, w_init_gain="sigmoid")

    def get_go_frame(self, memory):
        B = memory.size(0)
        return memory.new_zeros(B, self.n_mel_channels * self.n_frames_per_step)

    def initialize_decoder_states(self, memory, mask):
        B = memory.size(0)
        MAX_TIME = memory.size(1)
        self.attention_hidden = memory.new_zeros(B, self.attention_rnn_dim)
        self.attention_cell = memory.new_zeros(B, self.attention_rnn_dim)
        self.decoder_hidden = memory.new_zeros(B, self.decoder_rnn_dim)
        self.decoder_cell = memory.new_zeros(B, self.decoder_rnn_dim)
        self.attention_weights = memory.new_zeros(B, MAX_TIME)
        self.attention_weights_cum = memory.new_zeros(B, MAX_TIME)
        self.attention_context = memory.new_zeros(B, self.encoder_embedding_dim)
        self.memory = memory
        self.processed_memory = self.attention_layer.memory_layer(memory)
        self.mask = mask

    def parse_decoder_inputs(self, decoder_inputs):
        # (B, n_mel_channels, T_out) -> (B, T_out, n_mel_channels)
        decoder_inputs = decoder_inputs.transpose(1, 2)
        decoder_inputs = decoder_inputs.view(
            decoder_inputs.size(0), int(decoder_inputs.size(1) / self.n_frames_per_step), -1
        )
        # (B, T_out, n_mel_channels) -> (T_out, B, n_mel_channels)
        return decoder_inputs.transpose(0, 1)

    def parse_decoder_outputs(self, mel_outputs, gate_outputs, alignments):
        # (T_out, B) -> (B, T_out)
        alignments = torch.stack(alignments).transpose(0, 1)
        # (T_out, B) -> (B, T_out)
        gate_outputs = torch.stack(gate_outputs).transpose(0, 1)
        gate_outputs = gate_outputs.contiguous()
        # (T_out, B, n_mel_channels) -> (B, T_out, n_mel_channels)
        mel_outputs = torch.stack(mel_outputs).transpose(0, 1).contiguous()
        # decouple frames per step
        mel_outputs = mel_outputs.view(mel_outputs.size(0), -1, self.n_mel_channels)
        # (B, T_out, n_mel_channels) -> (B, n_mel_channels, T_out)
        mel_outputs = mel_outputs.transpose(1, 2)
        return mel_outputs, gate_outputs, alignments

    def decode(self, decoder_input):
        cell_input = torch.cat((decoder_input, self.attention_context), -1)
        self.attention_hidden, self.attention_cell = self.attention_rnn(
            cell_input, (self.attention_hidden, self.attention_cell)
        )
        self.attention_hidden = F.dropout(
            self.attention_hidden, self.p_attention_dropout, self.training
        )

        attention_weights_cat = torch.cat(
            (self.attention_weights.unsqueeze(1), self.attention_weights_cum.unsqueeze(1)), dim=1
        )
        self.attention_context, self.attention_weights = self.attention_layer(
            self.attention_hidden,
            self.memory,
            self.processed_memory,
            attention_weights_cat,
            self.mask,
        )

        self.attention_weights_cum += self.attention_weights
        decoder_input = torch.cat((self.attention_hidden, self.attention_context), -1)
        self.decoder_hidden, self.decoder_cell = self.decoder_rnn(
            decoder_input, (self.decoder_hidden, self.decoder_cell)
        )
        self.decoder_hidden = F.dropout(self.decoder_hidden, self.p_decoder_dropout, self.training)

        decoder_hidden_attention_context = torch.cat(
            (self.decoder_hidden, self.attention_context), dim=1
        )
        decoder_output = self.linear_projection(decoder_hidden_attention_context)
        gate_prediction = self.gate_layer(decoder_hidden_attention_context)
        return decoder_output, gate_prediction, self.attention_weights

    def forward(self, memory, decoder_inputs, memory_lengths):
        """Teacher forcing: memory [B, T_in, emb], decoder_inputs (mels) [B, n_mel, T_out]."""
        decoder_input = self.get_go_frame(memory).unsqueeze(0)
        decoder_inputs = self.parse_decoder_inputs(decoder_inputs)
        decoder_inputs = torch.cat((decoder_input, decoder_inputs), dim=0)
        decoder_inputs = self.prenet(decoder_inputs)

        self.initialize_decoder_states(memory, mask=~get_mask_from_lengths(memory_lengths))

        mel_outputs, gate_outputs, alignments = [], [], []
        while len(mel_outputs) < decoder_inputs.size(0) - 1:
            decoder_input = decoder_inputs[len(mel_outputs)]
            mel_output, gate_output, attention_weights = self.decode(decoder_input)
            mel_outputs += [mel_output.squeeze(1)]
            gate_outputs += [gate_output.squeeze(1)]
            alignments += [attention_weights]

        return self.parse_decoder_outputs(mel_outputs, gate_outputs, alignments)


class Tacotron2(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.mask_padding = hparams.mask_padding
        # NVIDIA masks the outputs with `.data.masked_fill_`, which also changes the mel
        # outputs that the postnet's first convolution saved for backward: its weight
        # gradient is then taken from the masked input, not the one its forward used.
        # False masks out of place: the true gradient of the same loss (what gradfuse gives).
        self.data_masking = True
        self.n_mel_channels = hparams.n_mel_channels
        self.n_frames_per_step = hparams.n_frames_per_step
        self.embedding = nn.Embedding(hparams.n_symbols, hparams.symbols_embedding_dim)
        std = sqrt(2.0 / (hparams.n_symbols + hparams.symbols_embedding_dim))
        val = sqrt(3.0) * std  # uniform bounds for std
        self.embedding.weight.data.uniform_(-val, val)
        self.encoder = Encoder(hparams)
        self.decoder = Decoder(hparams)
        self.postnet = Postnet(hparams)

    def parse_output(self, outputs, output_lengths=None):
        if self.mask_padding and output_lengths is not None:
            mask = ~get_mask_from_lengths(output_lengths)
            mask = mask.expand(self.n_mel_channels, mask.size(0), mask.size(1))
            mask = mask.permute(1, 0, 2)

            if self.data_masking:  # NVIDIA's: in place, behind autograd's back
                outputs[0].data.masked_fill_(mask, 0.0)
                outputs[1].data.masked_fill_(mask, 0.0)
                outputs[2].data.masked_fill_(mask[:, 0, :], 1e3)  # gate energies
            else:  # the same values, through autograd (see `data_masking`)
                outputs[0] = outputs[0].masked_fill(mask, 0.0)
                outputs[1] = outputs[1].masked_fill(mask, 0.0)
                outputs[2] = outputs[2].masked_fill(mask[:, 0, :], 1e3)
        return outputs

    def forward(self, inputs):
        """inputs: (text_inputs, text_lengths, mels, max_len, output_lengths); returns
        [mel_outputs, mel_outputs_postnet, gate_outputs, alignments]."""
        text_inputs, text_lengths, mels, max_len, output_lengths = inputs
        text_lengths, output_lengths = text_lengths.data, output_lengths.data

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
        mel_target.requires_grad = False
        gate_target.requires_grad = False
        gate_target = gate_target.view(-1, 1)

        mel_out, mel_out_postnet, gate_out, _ = model_output
        gate_out = gate_out.view(-1, 1)
        mel_loss = nn.MSELoss()(mel_out, mel_target) + nn.MSELoss()(mel_out_postnet, mel_target)
        gate_loss = nn.BCEWithLogitsLoss()(gate_out, gate_target)
        return mel_loss + gate_loss


@dataclass
class HParams:
    """NVIDIA's hparams.py model parameters, plus the dropout rates NVIDIA hard-codes."""

    n_symbols: int = 148
    symbols_embedding_dim: int = 512
    encoder_kernel_size: int = 5
    encoder_n_convolutions: int = 3
    encoder_embedding_dim: int = 512
    n_frames_per_step: int = 1
    decoder_rnn_dim: int = 1024
    prenet_dim: int = 256
    max_decoder_steps: int = 1000
    gate_threshold: float = 0.5
    p_attention_dropout: float = 0.1
    p_decoder_dropout: float = 0.1
    attention_rnn_dim: int = 1024
    attention_dim: int = 128
    attention_location_n_filters: int = 32
    attention_location_kernel_size: int = 31
    postnet_embedding_dim: int = 512
    postnet_kernel_size: int = 5
    postnet_n_convolutions: int = 5
    n_mel_channels: int = 80
    mask_padding: bool = True
    # not hparams in NVIDIA's code, which hard-codes 0.5 for each
    p_encoder_dropout: float = 0.5
    p_prenet_dropout: float = 0.5
    p_postnet_dropout: float = 0.5


def hparams(**overrides):
    """NVIDIA's defaults with `overrides` applied (an unknown name raises TypeError)."""
    return HParams(**overrides)


def synthetic_batch(
    rng,
    batch,
    max_text,
    frames,
    n_mel_channels=80,
    n_symbols=148,
    input_lengths=None,
    output_lengths=None,
):
    """A random batch as TextMelCollate makes it: (text_padded int64 [B, max_text],
    input_lengths int64 [B] sorted descending, the first max_text; mel_padded float32
    [B, n_mel, frames] zero beyond each output length; gate_padded float32 [B, frames], 1.0
    from each sample's last frame on; output_lengths int64 [B], the first `frames`)."""
    if input_lengths is None:
        rest = rng.integers(1, max_text + 1, size=batch - 1)
        input_lengths = [max_text] + sorted(rest.tolist(), reverse=True)
    if output_lengths is None:
        rest = rng.integers(max(1, frames // 2), frames + 1, size=batch - 1)
        output_lengths = [frames] + rest.tolist()
    in_lens = np.asarray(input_lengths, dtype=np.int64)
    out_lens = np.asarray(output_lengths, dtype=np.int64)
    assert in_lens.shape == (batch,) and in_lens[0] == max_text
    assert np.all(np.diff(in_lens) <= 0), "input lengths must be sorted descending"
    assert out_lens.shape == (batch,) and out_lens.max() == frames

    text = np.zeros((batch, max_text), dtype=np.int64)
    mels = np.zeros((batch, n_mel_channels, frames), dtype=np.float32)
    gate = np.zeros((batch, frames), dtype=np.float32)
    for i in range(batch):
        text[i, : in_lens[i]] = rng.integers(1, n_symbols, size=in_lens[i])
        mels[i, :, : out_lens[i]] = rng.standard_normal((n_mel_channels, out_lens[i]))
        gate[i, out_lens[i] - 1 :] = 1.0
    return text, in_lens, mels, gate, out_lens


def to_torch(batch, dtype=torch.float32):
    """What NVIDIA's `parse_batch` makes of a collated batch (on the CPU; `dtype` for the mels
    and gates, float32 as NVIDIA's `.float()` unless told):
    ((text_padded, input_lengths, mel_padded, max_len, output_lengths), (mel_padded, gate))."""
    text_padded, input_lengths, mel_padded, gate_padded, output_lengths = batch
    text_padded = torch.from_numpy(np.asarray(text_padded)).long()
    input_lengths = torch.from_numpy(np.asarray(input_lengths)).long()
    max_len = torch.max(input_lengths.data).item()
    mel_padded = torch.from_numpy(np.asarray(mel_padded)).to(dtype)
    gate_padded = torch.from_numpy(np.asarray(gate_padded)).to(dtype)
    output_lengths = torch.from_numpy(np.asarray(output_lengths)).long()
    return (
        (text_padded, input_lengths, mel_padded, max_len, output_lengths),
        (mel_padded, gate_padded),
    )


def train(model, batch, steps, lr=1e-3, weight_decay=1e-6, grad_clip_thresh=1.0):
    """train.py's inner step `steps` times on one `to_torch` batch (model in train mode, Adam,
    gradient-norm clipping); returns the losses before each step."""
    x, y = batch
    criterion = Tacotron2Loss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    losses = []
    for _ in range(steps):
        model.zero_grad()
        y_pred = model(x)
        loss = criterion(y_pred, y)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip_thresh)
        optimizer.step()
    return losses
