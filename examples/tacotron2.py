"""Tacotron 2 trains in gradfuse (issue 16): NVIDIA's model (`tacotron2_model.py`) and
its train.py step: Tacotron2Loss, gradient clipping at norm 1.0, Adam (lr 1e-3,
weight_decay 1e-6), dropout on.

The data is synthetic, made here (nothing is downloaded): batches of character ids of
lengths that vary within the batch (sorted longest first, as NVIDIA's collate does),
and mel targets that are a smooth function of the characters, each as long as its text
asks, zero-padded, with NVIDIA's gate targets (1.0 from each last frame on). The
lengths are fed with the batch, so one compile serves every batch of the same padded
shape (one (characters, frames) bucket).

    python examples/tacotron2.py                 # the full model: 28,193,153 parameters
    python examples/tacotron2.py --small         # the same structure, narrow: seconds
    python examples/tacotron2.py --batch 4 --text 14 --frames 98 --steps 2

It prints the loss falling.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tacotron2_model import SMALL, HParams, Tacotron2, Tacotron2Loss  # noqa: E402

import gradfuse  # noqa: E402
from gradfuse import Feeder, Receiver, execute, ir_for, nn  # noqa: E402

Batch = tuple[np.ndarray, ...]


def synthetic_batches(
    hp: HParams, batch: int, text: int, frames: int, count: int, seed: int = 0
) -> list[Batch]:
    """`count` batches (text ids, text lengths, mel targets, gate targets, mel lengths) as
    NVIDIA's TextMelCollate gives them: float32, padded to `text` characters and
    `frames` frames, the longest text first and as long as the padding."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        lengths = np.sort(rng.integers(max(1, text // 2), text + 1, batch))[::-1].copy()
        lengths[0] = text
        frame_lengths = np.maximum(1, np.round(frames * lengths / text)).astype(int)
        ids = np.zeros((batch, text), np.float32)
        mel = np.zeros((batch, hp.n_mel_channels, frames), np.float32)
        gate = np.zeros((batch, frames), np.float32)
        channels = np.arange(hp.n_mel_channels)[:, None]
        for b, (n, m) in enumerate(zip(lengths, frame_lengths)):
            ids[b, :n] = rng.integers(1, hp.n_symbols, n)
            char = ids[b, (np.arange(m) * n) // m]  # the character each frame says
            mel[b, :, :m] = np.sin(0.35 * channels + 0.9 * char[None, :]) * 0.5
            gate[b, m - 1 :] = 1.0
        out.append((ids, lengths.astype(np.float32), mel, gate, frame_lengths.astype(np.float32)))
    return out


def record(
    hp: HParams, data: list[Batch], steps: int, losses: list[float], *,
    lr: float = 1e-3, weight_decay: float = 1e-6, grad_clip_thresh: float = 1.0,
    model: Tacotron2 | None = None,
) -> Tacotron2:  # fmt: skip
    """Records `steps` training steps of NVIDIA's train.py on `data` (cycled); each
    step's loss is appended to `losses`. Returns the model (its params are trained by
    `execute`); `without_dropout(hp)` turns dropout off (for comparisons)."""
    if model is None:
        model = Tacotron2(hp)
    criterion = Tacotron2Loss()
    optimizer = nn.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    feed = itertools.cycle(data)
    current: dict[str, Batch] = {}
    batch, text, frames = data[0][0].shape[0], data[0][0].shape[1], data[0][2].shape[2]

    def part(k: int, name: str, shape: list[int]) -> Feeder:
        def get() -> np.ndarray:
            if k == 0:
                current["b"] = next(feed)
            return current["b"][k]

        return Feeder(get, shape=shape, name=name)

    def step() -> None:
        model.zero_grad()
        text_padded = part(0, "text", [batch, text])
        input_lengths = part(1, "input_lengths", [batch])
        mel_padded = part(2, "mel", [batch, hp.n_mel_channels, frames])
        gate_padded = part(3, "gate", [batch, frames])
        output_lengths = part(4, "output_lengths", [batch])
        x = (text_padded, input_lengths, mel_padded, frames, output_lengths)
        y = (mel_padded, gate_padded)
        y_pred = model(x)
        loss = criterion(y_pred, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip_thresh)
        optimizer.step()
        Receiver(lambda v: losses.append(float(v)), loss, name="loss")

    ir_for(range(steps), step)
    return model


def without_dropout(hp: HParams) -> HParams:
    """`hp` with every dropout rate 0."""
    return HParams(**{
        **hp.__dict__, "p_attention_dropout": 0.0, "p_decoder_dropout": 0.0,
        "p_prenet_dropout": 0.0, "p_conv_dropout": 0.0,
    })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a narrow model (seconds)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--text", type=int, default=12, help="characters (padded)")
    parser.add_argument("--frames", type=int, default=16, help="mel frames (padded)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--backend", default=None)
    args = parser.parse_args()
    gradfuse.manual_seed(0)
    hp = SMALL if args.small else HParams()
    steps = args.steps or (200 if args.small else 30)
    data = synthetic_batches(hp, args.batch, args.text, args.frames, count=2)
    losses: list[float] = []
    model = record(hp, data, steps, losses)
    count = sum(p.data.size for p in model.parameters())
    print(f"Tacotron 2: {len(list(model.parameters()))} parameter tensors, {count:,} values")
    start = time.perf_counter()
    execute(backend=args.backend)
    seconds = time.perf_counter() - start
    print(f"{steps} steps in {seconds:.1f} s (trace and compile included)")
    every = max(1, steps // 6)
    for i in range(0, steps, every):
        print(f"step {i:4d}: loss {np.mean(losses[i : i + every]):.4f}")
    first, last = np.mean(losses[:every]), np.mean(losses[-every:])
    assert last < first, f"the loss did not fall: {first:.4f} -> {last:.4f}"


if __name__ == "__main__":
    main()
