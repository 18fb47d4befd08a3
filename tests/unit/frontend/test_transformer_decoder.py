"""`nn.Transformer`, `TransformerDecoder` and `TransformerDecoderLayer`
(nn/transformer_decoder.py) against PyTorch's with the same state_dict: outputs and
every parameter's gradient, post-norm and pre-norm, with a causal target mask and
padding masks."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
import gradfuse.nn as nn
from gradfuse import Receiver, execute
from gradfuse.diagnostics import GradfuseError

E, H, FF, N, S, T = 16, 2, 32, 3, 5, 4
RNG = np.random.default_rng(7)
SRC = RNG.standard_normal((N, S, E))
TGT = RNG.standard_normal((N, T, E))
WEIGHT = RNG.standard_normal((N, T, E))
PADDING = np.zeros((N, S), bool)
PADDING[1, 3:] = True  # the second sequence's last two source positions are padding


def run_torch(norm_first: bool) -> tuple[dict, np.ndarray, dict]:
    """PyTorch's float64 model (as its tutorials build it), its output and gradients."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Transformer(
        d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF,
        dropout=0.0, batch_first=True, norm_first=norm_first,
    ).double()  # fmt: skip
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    padding = torch.tensor(PADDING)
    out = model(
        torch.tensor(SRC), torch.tensor(TGT), tgt_mask=mask, src_key_padding_mask=padding,
        memory_key_padding_mask=padding,
    )  # fmt: skip
    (out * torch.tensor(WEIGHT)).sum().backward()
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    grads = {k: p.grad.numpy() for k, p in model.named_parameters()}
    return state, out.detach().numpy(), grads


def run_gradfuse(state: dict, norm_first: bool, backend: str, dtype) -> tuple[np.ndarray, dict]:  # noqa: ANN001
    gradfuse.reset()
    model = nn.Transformer(
        d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF,
        dropout=0.0, batch_first=True, norm_first=norm_first,
    ).to(dtype)  # fmt: skip
    model.load_state_dict(state)
    mask = nn.Transformer.generate_square_subsequent_mask(T)
    out = model(
        gradfuse.tensor(SRC.astype(dtype)), gradfuse.tensor(TGT.astype(dtype)), tgt_mask=mask,
        src_key_padding_mask=PADDING, memory_key_padding_mask=PADDING,
    )  # fmt: skip
    (out * gradfuse.tensor(WEIGHT.astype(dtype))).sum().backward()
    names = [k for k, _ in model.named_parameters()]
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [out, *[p.grad for _, p in model.named_parameters()]])
    execute(backend=backend)
    return got[0], dict(zip(names, got[1:], strict=True))


def relative(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error relative to the largest magnitude of `want`."""
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_in_float64_is_pytorchs(norm_first: bool) -> None:
    state, want, want_grads = run_torch(norm_first)
    out, grads = run_gradfuse(state, norm_first, "reference", np.float64)
    assert sorted(grads) == sorted(want_grads)  # PyTorch's names, every parameter
    # float64 against float64 (2026-12-07): the output within 5.3e-16 of its largest
    # magnitude, gradients within 2e-15 (summation order); 1e-12 leaves FMA and another
    # vector width 500x
    assert relative(out, want) < 1e-12
    for key, value in want_grads.items():
        assert relative(grads[key], value) < 1e-12, key


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_transformer_in_float32_is_pytorchs(backend: str) -> None:
    state, want, want_grads = run_torch(False)
    out, grads = run_gradfuse(state, False, backend, np.float32)
    # float32 against float64 (2026-12-07, reference and c): the output within 2.5e-7
    # of its largest magnitude, gradients within 4.5e-7 (4 layers of 16 features);
    # bounds with a 20x margin
    assert relative(out, want) < 5e-6
    for key, value in want_grads.items():
        assert relative(grads[key], value) < 1e-5, key


def test_the_causal_mask_and_errors() -> None:
    gradfuse.reset()
    got: list[np.ndarray] = []
    Receiver(lambda v: got.append(v), nn.Transformer.generate_square_subsequent_mask(3))
    execute(backend="reference")
    assert (np.isneginf(got[0]) == np.triu(np.ones((3, 3), bool), 1)).all()
    assert (got[0][np.tril(np.ones((3, 3), bool))] == 0.0).all()
    with pytest.raises(GradfuseError, match="multiple of num_heads 3"):
        nn.TransformerDecoderLayer(16, 3)
    with pytest.raises(GradfuseError, match="num_layers must be >= 1"):
        nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF), 0)
    model = nn.Transformer(E, H, 1, 1, FF, batch_first=True)
    with pytest.raises(GradfuseError, match=r"batch sizes of src \(3\) and tgt \(2\)"):
        model(gradfuse.tensor(SRC.astype(np.float32)), gradfuse.tensor(TGT[:2].astype(np.float32)))
    with pytest.raises(GradfuseError, match=r"memory: expected an input of shape \[L, 16\]"):
        model.decoder(gradfuse.tensor(TGT.astype(np.float32)), gradfuse.tensor(np.zeros((3, 5, 8), np.float32)))
