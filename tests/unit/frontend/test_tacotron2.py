"""examples/tacotron2.py (issue 16) against NVIDIA's Tacotron 2 in PyTorch
(tests/unit/torch_tacotron2.py): names, sizes, and training steps from one state_dict.

A narrow model of the same structure (`SMALL`) keeps this cheap; the decoder is the
example's `gradfuse.steps` loop over the frames, the encoder's LSTM takes a packed batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import gradfuse
from gradfuse import execute

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import tacotron2 as example  # noqa: E402
import torch_tacotron2 as nvidia  # noqa: E402  (tests/unit)
from tacotron2_model import SMALL, HParams, Tacotron2  # noqa: E402

NAMES = [
    "embedding.weight", "encoder.convolutions.0.0.conv.weight",
    "encoder.lstm.weight_ih_l0_reverse", "decoder.prenet.layers.0.linear_layer.weight",
    "decoder.attention_rnn.weight_ih",
    "decoder.attention_layer.location_layer.location_conv.conv.weight",
    "decoder.linear_projection.linear_layer.weight", "decoder.gate_layer.linear_layer.bias",
    "postnet.convolutions.0.0.conv.weight",
]  # fmt: skip


def test_the_model_has_nvidias_names_and_sizes() -> None:
    model, tmodel = Tacotron2(HParams()), nvidia.Tacotron2(nvidia.hparams())
    params = list(model.parameters())
    assert len(params) == 60 and sum(p.data.size for p in params) == 28_193_153
    assert list(model.state_dict()) == list(tmodel.state_dict())  # buffers too, in order
    assert all(name in model.state_dict() for name in NAMES)
    for key, value in tmodel.state_dict().items():
        assert model.state_dict()[key].shape == tuple(value.shape), key


def torch_hparams(hp: HParams) -> object:
    fields = {k: v for k, v in hp.__dict__.items() if not k.startswith("p_")}
    return nvidia.hparams(
        **fields, p_attention_dropout=0.0, p_decoder_dropout=0.0, p_encoder_dropout=0.0,
        p_prenet_dropout=0.0, p_postnet_dropout=0.0,
    )  # fmt: skip


# Convolution biases right before a BatchNorm: their true gradient is exactly 0, and Adam
# turns rounding noise into full steps (the note), so they are checked apart: each
# moves at most 1.1 * lr a step (Adam's bound with its bias correction) on both sides. The
# running means after them follow them by momentum 0.1 a step: within 0.1 * (2 * 1.1 * lr)
# a step of PyTorch's.
BEFORE_BN = ("encoder.convolutions.", "postnet.convolutions.")
STEPS, LR = 3, 1e-3
# Against PyTorch in float64, after the 3 steps (relative to each parameter's largest
# value; the biases above apart): PyTorch float32 3.8e-5, gradfuse float32 6.3e-5
# (reference) and 2.4e-5 (c); the losses 1.3e-7, 8.2e-8 and 2.5e-7. Adam's first steps
# are lr * g / |g| for most entries, so a gradient near 0 moves by a sizeable part of lr
# on rounding alone: that is the 1e-5 scale here. F64 is the 1e-4 (a margin of
# 1.6x on the parameters, 400x on the losses).
F64 = 1e-4


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_three_training_steps_give_pytorchs_losses_and_parameters(backend: str) -> None:
    """Batch 2, 8 frames, lengths [5, 3] characters and [8, 6] frames, dropout off,
    Adam + clipping as NVIDIA's train.py, from one state_dict: every step's loss and the
    parameters after the 3 steps to F64 relative (each parameter to its largest value)."""
    hp = example.without_dropout(SMALL)
    torch.manual_seed(0)
    tmodel = nvidia.Tacotron2(torch_hparams(hp))
    tmodel.data_masking = False  # the true gradient of postnet.0's weight (see there)
    batch = nvidia.synthetic_batch(
        np.random.default_rng(0), 2, 5, 8, n_mel_channels=hp.n_mel_channels,
        n_symbols=hp.n_symbols, input_lengths=[5, 3], output_lengths=[8, 6],
    )  # fmt: skip
    gradfuse.reset()
    model = Tacotron2(hp)
    initial = {k: v.numpy().astype(np.float64) for k, v in tmodel.state_dict().items()}
    model.load_state_dict({k: v.numpy() for k, v in tmodel.state_dict().items()})
    losses: list[float] = []
    data = [tuple(a.astype(np.float32) for a in batch)]
    example.record(hp, data, STEPS, losses, model=model, lr=LR)
    execute(backend=backend)
    tmodel.double()  # the answer the float32 runs are measured against (see F64)
    want = nvidia.train(tmodel, nvidia.to_torch(batch, dtype=torch.float64), STEPS, lr=LR)
    np.testing.assert_allclose(losses, want, rtol=F64)
    got = model.state_dict()
    for key, value in tmodel.state_dict().items():
        w, g = value.numpy().astype(np.float64), np.asarray(got[key], np.float64)
        if key.startswith(BEFORE_BN) and key.endswith(".0.conv.bias"):
            start = initial[key]
            assert np.abs(g - start).max() <= 1.1 * LR * STEPS, key
            assert np.abs(w - start).max() <= 1.1 * LR * STEPS, key
        elif key.startswith(BEFORE_BN) and key.endswith(".1.running_mean"):
            assert np.abs(g - w).max() <= 0.1 * 2.2 * LR * STEPS, key
        else:
            assert np.abs(g - w).max() / max(np.abs(w).max(), 1e-30) < F64, key


def test_with_dropout_the_example_trains_its_loss_down_on_c() -> None:
    """The example's training (dropout on, in the frame loop too) on its synthetic data."""
    gradfuse.manual_seed(0)
    data = example.synthetic_batches(SMALL, 2, 8, 10, count=2)
    losses: list[float] = []
    example.record(SMALL, data, 60, losses)
    execute(backend="c")
    assert len(losses) == 60 and np.mean(losses[-10:]) < 0.9 * np.mean(losses[:10])
