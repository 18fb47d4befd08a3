"""Recurrent training (issue 15): a word-level LSTM language model shaped like
pytorch/examples' word_language_model, measured in one run.

    .venv/bin/python benchmarks/rnn.py [--steps 3] [--rounds 5] [--threads N] [--vocab 10000]
        [--backend c|cuda]

The model: Embedding(vocab, 200) -> 2-layer LSTM(200, 200) -> Linear(200, vocab),
cross-entropy on the next word, 35-step BPTT, batch 20, SGD (lr 20) after
clip_grad_norm_(0.25), as the example trains it (dropout 0 here, and the hidden state
starts from zeros each step in both frameworks, so that the two compute the same step).

1. Kernels per training step on gradfuse's fused program, beside the ATen ops that
   PyTorch runs for the same step (leaf ops of torch.profiler's CPU trace: each is
   one kernel call, the count a GPU run would launch at least).
2. Seconds per step on the c backend and PyTorch CPU eager (which runs the LSTM as
   oneDNN's fused RNN primitive), or with `--backend cuda` on the GPU against PyTorch
   CUDA eager (cuDNN's LSTM), and their ratio: the best of `--rounds` runs of
   `--steps` steps each, the two taking turns, so that a shared machine's changing
   load weighs on both alike.
3. Trace+compile seconds at 32 and at 512 time steps, gcc (or nvcc) included (an empty cache),
   the best of two (one `tg.for` per layer, so the program is the same size; the
   goal is within 1.5x).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

import numpy as np
from empty_cache import empty_cache  # benchmarks/empty_cache.py
from threads import add_threads_option, use_threads  # benchmarks/threads.py
from timing import best_of  # benchmarks/timing.py

import gradfuse
from gradfuse import Feeder, ir_for
from gradfuse import nn as gnn
from gradfuse.nn import functional as gF

EMB, HIDDEN, LAYERS, BATCH = 200, 200, 2, 20
LR, CLIP = 20.0, 0.25


def batches(
    vocab: int, bptt: int, count: int, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` (input, target) pairs of word ids as floats: [bptt, batch] each."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, vocab, size=(count * bptt + 1, BATCH))
    return [
        (words[i * bptt : (i + 1) * bptt].astype(np.float32),
         words[i * bptt + 1 : (i + 1) * bptt + 1].astype(np.float32))
        for i in range(count)
    ]  # fmt: skip


class GradfuseLM(gnn.Module):
    """pytorch/examples' RNNModel('LSTM', ...) without dropout, in gradfuse."""

    def __init__(self, vocab: int):
        super().__init__()
        self.encoder = gnn.Embedding(vocab, EMB)
        self.rnn = gnn.LSTM(EMB, HIDDEN, LAYERS)
        self.decoder = gnn.Linear(HIDDEN, vocab)

    def forward(self, words):
        out, _ = self.rnn(self.encoder(words))
        return self.decoder(out).view(-1, self.decoder.out_features)


def record(vocab: int, bptt: int, data: list, steps: int) -> gnn.Module:
    """Records `steps` training steps of the gradfuse model, cycling through `data`
    (so that the compiled program may run again)."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    model = GradfuseLM(vocab)
    feed = itertools.cycle(data)
    current: dict[str, np.ndarray] = {}

    def next_batch() -> np.ndarray:
        current["x"], current["y"] = next(feed)
        return current["x"]

    def step() -> None:
        model.zero_grad()
        x = Feeder(next_batch, shape=[bptt, BATCH], name="words")
        y = Feeder(lambda: current["y"].reshape(-1), shape=[bptt * BATCH], name="targets")
        loss = gF.cross_entropy(model(x), y)
        loss.backward()
        gnn.utils.clip_grad_norm_(model.parameters(), CLIP)
        for p in model.parameters():
            p.assign(p - LR * p.grad)

    ir_for(range(steps), step)
    return model


def gradfuse_step(vocab: int, steps: int, backend: str = "c") -> tuple[int, Callable[[], None]]:
    """Kernels per step of the fused program, and a run of `steps` steps on `backend`
    (compiled and run once: the first run pays for loading the library)."""
    data = batches(vocab, 35, steps)
    record(vocab, 35, data, 1)
    kernels = gradfuse.compile("numpy").kernels_per_iteration
    record(vocab, 35, data, steps)
    program = gradfuse.compile(backend)
    program.run()
    return kernels, program.run


def compile_seconds(vocab: int, bptt: int, tries: int = 2, backend: str = "c") -> float:
    """Trace + compile (gcc or nvcc included: an empty cache each time) seconds of one
    training step at `bptt` time steps on `backend`, the best of `tries`."""
    best = float("inf")
    for _ in range(tries):
        with empty_cache():
            start = time.perf_counter()
            record(vocab, bptt, batches(vocab, bptt, 1), 1)
            gradfuse.compile(backend)
            best = min(best, time.perf_counter() - start)
    return best


def torch_step(
    vocab: int, steps: int, device: str = "cpu"
) -> tuple[int, Callable[[], None]] | None:
    """ATen leaf ops per step of the same model in PyTorch eager on `device`, and a run
    of `steps` steps (after one warm-up step)."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(vocab, EMB)
            self.rnn = nn.LSTM(EMB, HIDDEN, LAYERS)
            self.decoder = nn.Linear(HIDDEN, vocab)

        def forward(self, words):
            output, _ = self.rnn(self.encoder(words))
            return self.decoder(output).view(-1, vocab)

    torch.manual_seed(0)
    model = RNNModel().to(device)
    criterion = nn.CrossEntropyLoss()
    data = [
        (torch.from_numpy(x).long().to(device), torch.from_numpy(y).long().to(device))
        for x, y in batches(vocab, 35, steps)
    ]

    def train_step(x, y):
        model.zero_grad()
        loss = criterion(model(x), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-LR)

    train_step(*data[0])  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        train_step(*data[0])
    leaves = [
        e for e in prof.events()
        if e.name.startswith("aten::") and not any(c.name.startswith("aten::") for c in e.cpu_children)
    ]  # fmt: skip

    def run() -> None:
        for x, y in data:
            train_step(x, y)
        if device == "cuda":
            torch.cuda.synchronize()

    return len(leaves), run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="training steps per timed run")
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each, taking turns")
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--backend", choices=["c", "cuda"], default="c")
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    device = "cuda" if args.backend == "cuda" else "cpu"

    kernels, ours = gradfuse_step(args.vocab, args.steps, args.backend)
    torch_side = torch_step(args.vocab, args.steps, device)
    runs = [ours] if torch_side is None else [ours, torch_side[1]]
    best = [t / args.steps for t in best_of(args.rounds, runs)]
    print(
        f"word-level LSTM LM: vocab {args.vocab}, 2x LSTM({EMB}, {HIDDEN}), bptt 35, batch {BATCH}"
    )
    print(f"  kernels per training step, gradfuse: {kernels} ({kernels / 35:.1f} per time step)")
    if torch_side is not None:
        print(f"  ATen ops per training step, PyTorch {device.upper()} eager: {torch_side[0]}")
    print(
        f"  seconds per step (best of {args.rounds} rounds of {args.steps} steps),"
        f" gradfuse {args.backend}: {best[0]:.4f}"
    )
    if torch_side is not None:
        print(
            f"  seconds per step (the same rounds, taking turns), PyTorch {device.upper()}"
            f" eager: {best[1]:.4f}"
        )
        print(f"  speed-up of gradfuse {args.backend} over PyTorch: {best[1] / best[0]:.2f}x")
    short = compile_seconds(args.vocab, 32, backend=args.backend)
    long = compile_seconds(args.vocab, 512, backend=args.backend)
    print(f"  trace+compile seconds, 32 steps: {short:.2f}, 512 steps: {long:.2f}"
          f" (ratio {long / short:.2f}, goal <= 1.5)")  # fmt: skip


if __name__ == "__main__":
    main()
