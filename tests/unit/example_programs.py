"""The programs of the Python examples, recorded through gradfuse's Python API.

from example_programs import record_mlp, transformer_example, record_reverser

record_mlp(255, 2, 1000)                     # examples/mlp.py's program, not run
record_reverser(transformer_example(), 200, 25)   # examples/transformer.py's `train`
text = gradfuse.ir_text()                    # what `ir-opt` reads
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType

import numpy as np

import gradfuse
from gradfuse import Feeder, Receiver, ir_for
from gradfuse.nn import (
    SGD,
    Adam,
    Conv2d,
    CrossEntropyLoss,
    Flatten,
    Linear,
    ReLU,
    Sequential,
    Sigmoid,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Received = list[tuple[np.ndarray, ...]]


def record_mlp(width: int, batch: int, steps: int) -> tuple[Sequential, Received]:
    """Records examples/mlp.py's program at `width` x `batch` (the example: 255, 2, 1000)
    into a new program; the model and the list its receiver appends to."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    nn = Sequential(Linear(width, width), Sigmoid(), Linear(width, width))
    opt = SGD(nn.parameters(), lr=0.01)
    saved: Received = []

    def f() -> None:
        opt.zero_grad()
        val = Feeder(lambda: np.full((batch, width), 0.2, dtype=np.float32), shape=[batch, width])
        res = nn(val)
        res.backward()
        opt.step()

    ir_for(range(0, steps), f)
    Receiver(lambda *args: saved.append(args), opt.parameters, name="saving params")
    return nn, saved


def record_conv_step(steps: int, feeder_sleep: float = 0.0, feeder: str = "images") -> None:
    """A conv net's SGD step in an `ir_for` of `steps` iterations (what the profiler
    tests time): a feeder that sleeps `feeder_sleep` s, and a receiver of the params at
    the end of each iteration, so that the loop saves params (param copies)."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    nn = Sequential(Conv2d(3, 4, 3, padding=1), ReLU(), Flatten(), Linear(4 * 6 * 6, 2))
    opt = SGD(nn.parameters(), lr=0.01)

    def batch() -> np.ndarray:
        time.sleep(feeder_sleep)
        return np.full((2, 3, 6, 6), 0.3, dtype=np.float32)

    def f() -> None:
        opt.zero_grad()
        nn(Feeder(batch, shape=[2, 3, 6, 6], name=feeder)).backward()
        opt.step()
        Receiver(lambda *args: None, opt.parameters, name="log")

    ir_for(range(0, steps), f)


def load_example(name: str, **constants: object) -> ModuleType:
    """examples/<name>.py, imported from its path as a new module object (its `main`
    does not run), with module constants such as `D_MODEL=8` replaced."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in constants.items():
        assert hasattr(module, key), key
        setattr(module, key, value)
    return module


def transformer_example(**sizes: int) -> ModuleType:
    """examples/transformer.py with `sizes` replaced (see `load_example`)."""
    return load_example("transformer", **sizes)


def record_reverser(ex: ModuleType, steps: int, log_every: int) -> None:
    """Records the training program of examples/transformer.py into a new program:
    `log_every - 1` steps in an inner loop, then one whose loss is received, all
    `steps // log_every` times (Adam, CrossEntropyLoss, feeders "tokens", "targets")."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    model = ex.Reverser()
    opt = Adam(model.parameters(), lr=3e-3)
    loss_fn = CrossEntropyLoss()
    data = ex.Batches(seed=1)

    def train_step() -> gradfuse.Tensor:
        opt.zero_grad()
        ids = Feeder(data.tokens, shape=[ex.BATCH, ex.LENGTH], name="tokens")
        target = Feeder(data.targets, shape=[ex.BATCH, ex.LENGTH], name="targets")
        loss = loss_fn(model(ids), target)
        loss.backward()
        opt.step()
        return loss

    def block() -> None:
        ir_for(range(log_every - 1), train_step)
        Receiver(lambda loss: None, train_step(), name="loss")

    ir_for(range(steps // log_every), block)
