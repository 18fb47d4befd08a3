"""Bad input to a model: out-of-range ids from a feeder, wrong d_model/nhead, wrong ranks.

Ids an `Embedding` or `cross_entropy` reads from a feeder are checked on the host
each time the feeder is called, before the program uses the array (reference, numpy,
c, and cuda where there is a GPU: on the host, before the copy to the device);
trace-time errors carry this file's name.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.id_ranges import CheckedFeeder
from gradfuse.frontend.recorder import program
from gradfuse.nn import (
    SGD,
    CrossEntropyLoss,
    Embedding,
    Linear,
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
)

BACKENDS = ["reference", "numpy", "c", "cuda"]
V, D, N, L, LR = 8, 4, 2, 3, 0.5
GOOD = [
    np.array([[1, 2, 3], [4, 5, 6]], np.float32),
    np.array([[0, 7, 7], [3, 3, 1]], np.float32),
]
BAD = {  # the bad id, as the message shows it, and why it is bad
    "too large": (9.0, "9", "is out of range"),
    "negative": (-1.0, "-1", "is out of range"),
    "not an integer": (2.5, "2.5", "is not an integer"),
    "nan": (np.nan, "nan", "is not an integer"),
}


def batches(bad: float | None) -> Callable[[], np.ndarray]:
    """A callback giving GOOD[0], GOOD[1], then (with `bad`) GOOD[0] with `bad` at [1, 1]."""
    items = [a.copy() for a in GOOD] + [GOOD[0].copy()]
    if bad is not None:
        items[2][1, 1] = bad
    it = iter(items)
    return lambda: next(it)


def train_embedding(feed: Callable[[], np.ndarray]) -> tuple[Embedding, list[np.ndarray]]:
    """Records 3 SGD steps on `emb(ids).sum()`; returns the table and its per-step values."""
    emb = Embedding(V, D)
    opt = SGD(emb.parameters(), lr=LR)
    seen: list[np.ndarray] = []

    def step() -> None:
        loss = emb(Feeder(feed, shape=[N, L], name="tokens")).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        Receiver(seen.append, emb.weight, name="weight")

    ir_for(range(3), step)
    return emb, seen


def sgd_on_counts(w0: np.ndarray, batches: list[np.ndarray]) -> np.ndarray:
    """The table after SGD on `sum(emb(ids))`: each use of a row subtracts LR from it."""
    w = w0.astype(np.float64)
    for ids in batches:
        w -= LR * np.bincount(ids.astype(int).ravel(), minlength=V)[:, None]
    return w


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_range_ids_run(backend: str) -> None:
    emb, seen = train_embedding(batches(None))
    w0 = emb.weight.data.copy()
    execute(backend)
    assert len(seen) == 3
    want = sgd_on_counts(w0, GOOD + GOOD[:1])
    np.testing.assert_allclose(emb.weight.data, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_ids_are_errors_naming_the_feeder_and_keep_the_last_iteration(
    backend: str, bad: str
) -> None:
    value, shown, reason = BAD[bad]
    emb, seen = train_embedding(batches(value))
    w0 = emb.weight.data.copy()
    with pytest.raises(GradfuseError) as info:
        execute(backend)
    message = str(info.value)
    assert (
        f'feeder "tokens" (call 2): raised ValueError: token id {shown} at [1, 1] {reason}'
        f" for Embedding({V}, {D}): ids must be integers in [0, {V})"
    ) in message
    assert "iteration 2" in message
    assert "test_bad_model_input.py" in message
    assert len(seen) == 2
    want = sgd_on_counts(w0, GOOD)
    np.testing.assert_allclose(emb.weight.data, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(emb.weight.data, seen[-1])


def test_only_the_ids_read_are_checked_at_their_place_in_the_fed_array() -> None:
    rows = np.array([[1, 2, 3, -1], [4, 5, 6, -1]], np.float32)  # last column never read
    emb = Embedding(V, D)
    out: list[np.ndarray] = []
    tokens = Feeder(lambda: rows, shape=[N, L + 1], name="tokens")
    Receiver(out.append, emb(tokens[:, :L].transpose(0, 1).reshape(L * N)))
    execute("reference")
    np.testing.assert_array_equal(out[0], emb.weight.data[rows[:, :L].T.reshape(-1).astype(int)])
    rows[0, 2] = 8
    emb = Embedding(V, D)
    tokens = Feeder(lambda: rows, shape=[N, L + 1], name="tokens")
    Receiver(out.append, emb(tokens[:, :L].transpose(0, 1)))
    with pytest.raises(GradfuseError, match=r"token id 8 at \[0, 2\] is out of range"):
        execute("reference")


def test_the_tightest_range_wins() -> None:
    tokens = Feeder(lambda: np.full((N, L), 6.0, np.float32), shape=[N, L], name="tokens")
    Receiver(lambda *a: None, [Embedding(V, D)(tokens), Embedding(5, D)(tokens)])
    with pytest.raises(GradfuseError, match=r"for Embedding\(5, 4\): ids must be integers in"):
        execute("reference")


def test_ids_not_read_straight_from_a_feeder_are_left_alone() -> None:
    tokens = Feeder(lambda: np.full((N, L), 3.0, np.float32), shape=[N, L], name="tokens")
    Embedding(V, D)(tokens + 1.0)
    assert not isinstance(program().feeders["tokens"], CheckedFeeder)
    Embedding(V, D)(tokens)
    assert isinstance(program().feeders["tokens"], CheckedFeeder)


def test_an_array_feeder_is_checked_when_the_lookup_is_recorded() -> None:
    items = np.stack(GOOD + [GOOD[0]])
    items[2, 0, 1] = V
    tokens = Feeder(items, shape=[N, L], name="tokens")
    with pytest.raises(GradfuseError) as info:
        Embedding(V, D)(tokens)
    message = str(info.value)
    assert 'feeder "tokens" (call 2): token id 8 at [0, 1] is out of range' in message
    assert "test_bad_model_input.py" in message


def classify(targets: Callable[[], np.ndarray], steps: int = 2) -> Linear:
    """Records `steps` SGD steps of a linear classifier of 4 samples into 10 classes."""
    model = Linear(3, 10)
    opt = SGD(model.parameters(), lr=0.1)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)

    def step() -> None:
        logits = model(Feeder(lambda: x, shape=[4, 3], name="x"))
        loss = CrossEntropyLoss()(logits, Feeder(targets, shape=[4], name="labels"))
        opt.zero_grad()
        loss.backward()
        opt.step()

    ir_for(range(steps), step)
    return model


LABELS = np.array([0, 9, 3, 1], np.float32)


@pytest.mark.parametrize("bad", [10.0, -1.0, 0.5], ids=["too large", "negative", "fraction"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_targets_out_of_range_name_the_feeder(backend: str, bad: float) -> None:
    wrong = LABELS.copy()
    wrong[1] = bad
    labels = iter([LABELS, wrong])
    model = classify(lambda: next(labels))
    with pytest.raises(GradfuseError) as info:
        execute(backend)
    message = str(info.value)
    reason = "is not an integer" if bad == 0.5 else "is out of range"
    assert (
        f'feeder "labels" (call 1): raised ValueError: class index {bad:g} at [1] {reason}'
        " for cross_entropy over 10 classes: targets must be integers in [0, 10)"
    ) in message
    assert "iteration 1" in message and "test_bad_model_input.py" in message
    gradfuse.manual_seed(0)  # the same initial params, one good step
    once = classify(lambda: LABELS, steps=1)
    execute("reference")
    np.testing.assert_allclose(model.weight.data, once.weight.data, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.bias.data, once.bias.data, rtol=1e-5, atol=1e-6)


# --- trace-time errors -------------------------------------------------------------


def test_heads_that_do_not_divide_d_model_are_errors_at_the_users_line() -> None:
    with pytest.raises(GradfuseError) as info:
        TransformerEncoderLayer(30, 4)
    assert "test_bad_model_input.py" in str(info.value)
    assert "d_model 30 is not divisible by nhead 4" in str(info.value)
    with pytest.raises(GradfuseError) as info:
        MultiheadAttention(30, 4)
    assert "test_bad_model_input.py" in str(info.value)
    assert "embed_dim 30 is not divisible by num_heads 4" in str(info.value)
    with pytest.raises(GradfuseError, match="nhead 0 must be positive"):
        TransformerEncoderLayer(16, 0)


E = 16
WRONG = {"1-D": [E], "4-D": [2, 3, 5, E], "last dim": [N, 5, 8], "unbatched last dim": [5, 8]}


@pytest.mark.parametrize("shape", list(WRONG.values()), ids=list(WRONG))
@pytest.mark.parametrize("what", ["layer", "encoder", "attention"])
def test_wrong_input_shapes_are_errors_at_the_users_line(what: str, shape: list[int]) -> None:
    layer = TransformerEncoderLayer(E, 2, 32, dropout=0.0, batch_first=True)
    x = Feeder(lambda: np.zeros(shape, np.float32), shape=shape)
    with pytest.raises(GradfuseError) as info:
        if what == "layer":
            layer(x)
        elif what == "encoder":
            TransformerEncoder(layer, 2)(x)
        else:
            MultiheadAttention(E, 2, batch_first=True)(x, x, x)
    message = str(info.value)
    assert "test_bad_model_input.py" in message
    assert (
        f"expected an input of shape [L, {E}] or a batch [N, L, {E}] (batch_first=True)" in message
    )


def test_unbatched_and_batched_inputs_still_run() -> None:
    layer = TransformerEncoderLayer(E, 2, 32, dropout=0.0, batch_first=True)
    out: list[np.ndarray] = []
    x = np.random.default_rng(0).normal(size=(N, 5, E)).astype(np.float32)
    Receiver(out.append, layer(Feeder(lambda: x, shape=[N, 5, E])))
    Receiver(out.append, layer(Feeder(lambda: x[0], shape=[5, E])))
    execute("reference")
    assert out[0].shape == (N, 5, E) and out[1].shape == (5, E)
    np.testing.assert_allclose(out[1], out[0][0], rtol=1e-5, atol=1e-5)
