"""A small TransformerEncoder learns to reverse token sequences, trained whole in `ir_for`.

Tokens and targets come from feeders, the model is Embedding + learned positions +
TransformerEncoder + Linear, the loss CrossEntropyLoss, the optimizer Adam; a
receiver reports the loss every LOG_EVERY steps (the outer loop's body runs
LOG_EVERY - 1 steps in an inner loop, then one more whose loss it receives):

    python examples/transformer.py            # default backend
    GRADFUSE_BACKEND=reference python examples/transformer.py
    python examples/transformer.py --profile  # the kernel table of one step
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gradfuse
from gradfuse import Feeder, Receiver, Tensor, execute, ir_for
from gradfuse.nn import (
    Adam,
    CrossEntropyLoss,
    Embedding,
    Linear,
    Module,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from gradfuse.profiler import profile, schedule

VOCAB, LENGTH, BATCH = 8, 8, 16
D_MODEL, HEADS, FF, LAYERS = 32, 4, 64, 2
STEPS, LOG_EVERY = 200, 25


class Reverser(Module):
    """Token ids [N, L] -> logits [N, VOCAB, L] for the reversed sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = Embedding(VOCAB, D_MODEL)
        self.positions = Embedding(LENGTH, D_MODEL)
        layer = TransformerEncoderLayer(
            D_MODEL, HEADS, FF, dropout=0.1, batch_first=True, norm_first=True
        )
        self.encoder = TransformerEncoder(layer, LAYERS)
        self.head = Linear(D_MODEL, VOCAB)

    def forward(self, ids: Tensor) -> Tensor:
        where = gradfuse.constant(np.arange(LENGTH, dtype=np.float32))
        h = self.tokens(ids) + self.positions(where)
        return self.head(self.encoder(h)).permute(0, 2, 1)


class Batches:
    """Random sequences; `targets()` gives the reverse of the last `tokens()`."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.last = np.zeros((BATCH, LENGTH), np.float32)

    def tokens(self) -> np.ndarray:
        self.last = self.rng.integers(0, VOCAB, (BATCH, LENGTH)).astype(np.float32)
        return self.last

    def targets(self) -> np.ndarray:
        return np.ascontiguousarray(self.last[:, ::-1])


def record(steps: int = STEPS, log_every: int = LOG_EVERY) -> tuple[Reverser, list[float]]:
    """Records `steps` training steps of a new model; the model and the list that the
    loss receiver fills every `log_every` steps."""
    gradfuse.manual_seed(0)
    model = Reverser()
    opt = Adam(model.parameters(), lr=3e-3)
    loss_fn = CrossEntropyLoss()
    data = Batches(seed=1)
    losses: list[float] = []

    def train_step() -> Tensor:
        opt.zero_grad()
        ids = Feeder(data.tokens, shape=[BATCH, LENGTH], name="tokens")
        target = Feeder(data.targets, shape=[BATCH, LENGTH], name="targets")
        loss = loss_fn(model(ids), target)
        loss.backward()
        opt.step()
        return loss

    def report(loss: np.ndarray) -> None:
        losses.append(float(loss))
        print(f"step {len(losses) * log_every:4d}  loss {float(loss):.4f}", flush=True)

    def block() -> None:
        ir_for(range(log_every - 1), train_step)
        Receiver(report, train_step(), name="loss")

    ir_for(range(steps // log_every), block)
    return model, losses


def train(
    steps: int = STEPS, log_every: int = LOG_EVERY, backend: str | None = None
) -> tuple[Reverser, list[float]]:
    """Trains a new model for `steps` steps on `backend`; the model and the received losses."""
    model, losses = record(steps, log_every)
    start = time.perf_counter()
    program = gradfuse.compile(backend)
    compiled = time.perf_counter()
    program.run()
    done = time.perf_counter()
    print(
        f"{steps} steps on the {program.backend} backend: compile {compiled - start:.1f} s,"
        f" run {done - compiled:.1f} s ({(done - compiled) / steps * 1e3:.1f} ms a step)"
    )
    return model, losses


def profile_steps(steps: int = 5, backend: str | None = None, trace: str | None = None) -> profile:
    """Profiles the training step: a 5-step run with one step per iteration of the
    outer `ir_for` (log_every=1), steps 2 to 4 recorded; prints PyProf's kernel table of
    step 2, the time per layer and the step overview; `trace`: a Chrome trace file."""
    record(steps, log_every=1)
    with profile(schedule=schedule(wait=1, warmup=1, active=3), with_flops=True) as prof:
        gradfuse.compile(backend).run()
    print(prof.summary())
    if trace:
        prof.export_chrome_trace(trace)
        print(f"trace: {trace} (open it in https://ui.perfetto.dev or TensorBoard)")
    return prof


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--profile", action="store_true", help="profile the training step")
    args.add_argument("--trace", help="with --profile: write a Chrome trace here")
    opts = args.parse_args()
    if opts.profile:
        profile_steps(trace=opts.trace)
        return
    model, _ = train()
    model.eval()
    test = Batches(seed=2)
    predictions: list[np.ndarray] = []
    logits = model(Feeder(test.tokens, shape=[BATCH, LENGTH], name="tokens"))
    Receiver(predictions.append, logits, name="logits")
    execute()
    accuracy = float((predictions[0].argmax(1) == test.targets()).mean())
    print(f"reversal accuracy on new sequences: {accuracy:.0%} (chance {1 / VOCAB:.0%})")


if __name__ == "__main__":
    main()
