"""State that a Python training loop carries from one iteration to the next, as
PyTorch's examples write it (gradfuse/frontend/carry.py): the hidden state of a
language model passed from batch to batch (before, every iteration silently restarted
from the state before the loop), and gradients that are never zeroed (before, silently
zeroed every iteration; now an error, since PyTorch would accumulate them)."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
import gradfuse.nn as nn
import gradfuse.optim as optim
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError

RNG = np.random.default_rng(11)
TOKENS = RNG.integers(0, 12, size=(4, 5, 3)).astype(np.float32)  # 4 batches, [T=5, B=3]
TARGETS = RNG.integers(0, 12, size=(4, 15)).astype(np.float32)


class RNNModel(nn.Module):
    """word_language_model's RNNModel (an LSTM), without dropout."""

    def __init__(self, ntoken: int, ninp: int, nhid: int):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, 1)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid

    def forward(self, input, hidden):  # noqa: ANN001, ANN201
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(output).view(-1, 12)
        return gradfuse.nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int):  # noqa: ANN201
        weight = next(self.parameters())
        return (weight.new_zeros(1, bsz, self.nhid), weight.new_zeros(1, bsz, self.nhid))


def repackage_hidden(h):  # noqa: ANN001, ANN201
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, tuple):
        return tuple(repackage_hidden(v) for v in h)
    return h.detach()


def train_language_model(backend: str) -> tuple[list[float], dict, dict, list[np.ndarray]]:
    gradfuse.reset()
    gradfuse.manual_seed(3)
    model = RNNModel(12, 6, 8)
    start = {k: v.copy() for k, v in model.state_dict().items()}
    criterion = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.5)
    tokens, targets = iter(TOKENS), iter(TARGETS)
    losses: list[float] = []
    hidden = model.init_hidden(3)

    def step() -> None:
        nonlocal hidden
        data = Feeder(lambda: next(tokens), shape=[5, 3])
        target = Feeder(lambda: next(targets), shape=[15])
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        Receiver(lambda v: losses.append(float(v)), loss)

    ir_for(range(4), step)
    final: list[np.ndarray] = []
    Receiver(lambda *v: final.extend(v), list(hidden))  # the last iteration's state
    execute(backend=backend)
    return losses, start, model.state_dict(), final


def torch_language_model(start: dict) -> tuple[list[float], dict, list[np.ndarray]]:
    torch = pytest.importorskip("torch")
    tnn = torch.nn

    class TorchRNNModel(tnn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = tnn.Embedding(12, 6)
            self.rnn = tnn.LSTM(6, 8, 1)
            self.decoder = tnn.Linear(8, 12)

        def forward(self, input, hidden):  # noqa: ANN001, ANN202
            output, hidden = self.rnn(self.encoder(input), hidden)
            return torch.log_softmax(self.decoder(output).view(-1, 12), dim=1), hidden

    model = TorchRNNModel().double()
    model.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in start.items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    hidden = (torch.zeros(1, 3, 8, dtype=torch.float64), torch.zeros(1, 3, 8, dtype=torch.float64))
    losses = []
    for k in range(4):
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(torch.tensor(TOKENS[k]).long(), hidden)
        loss = tnn.NLLLoss()(output, torch.tensor(TARGETS[k]).long())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    return losses, state, [h.detach().numpy() for h in hidden]


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_the_hidden_state_goes_from_batch_to_batch_as_in_pytorch(backend: str) -> None:
    losses, start, end, final = train_language_model(backend)
    want_losses, want_end, want_final = torch_language_model(start)
    # float32 against float64 (2026-12-07, reference and c): the losses (~2.5) within
    # 1.8e-7 relative; the params (embeddings up to ~3) within 3.5e-7 absolute, 2 ulps of
    # float32 there; the state within 9.6e-8. The bounds have a 5-10x margin.
    np.testing.assert_allclose(losses, want_losses, rtol=2e-6)
    for key, value in want_end.items():
        np.testing.assert_allclose(end[key], value, rtol=2e-6, atol=5e-7)
    for got, want in zip(final, want_final, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-7)


def test_a_global_state_is_carried_and_read_after_the_loop() -> None:
    gradfuse.reset()
    global COUNT
    COUNT = gradfuse.constant(np.zeros(2, np.float32))
    seen: list[np.ndarray] = []

    def step() -> None:
        global COUNT
        COUNT = COUNT + 1.0
        Receiver(lambda v: seen.append(v), COUNT)

    ir_for(range(3), step)
    ir_for(range(2), step)  # again: the same state goes on
    Receiver(lambda v: seen.append(v), COUNT * 10.0)
    execute(backend="reference")
    np.testing.assert_array_equal(np.array(seen)[:, 0], [1, 2, 3, 4, 5, 50])


def test_a_state_updated_in_place_is_carried_and_its_other_names_follow() -> None:
    gradfuse.reset()
    total = gradfuse.constant(np.zeros(2, np.float32))
    alias = total  # PyTorch's `+=` updates the one tensor both names hold
    seen: list[np.ndarray] = []

    def step() -> None:
        nonlocal total
        total += gradfuse.constant([1.0, 2.0])
        Receiver(lambda v: seen.append(v), total * 1.0)

    ir_for(range(3), step)
    Receiver(lambda v: seen.append(v), alias * 10.0)  # after the loop: the last state
    execute(backend="reference")
    np.testing.assert_array_equal(np.array(seen)[:, 1], [2.0, 4.0, 6.0, 60.0])


def test_a_failed_body_undoes_its_updates_in_place() -> None:
    gradfuse.reset()
    h = gradfuse.constant(np.zeros(2, np.float32))
    before = h.value

    def fail() -> None:
        h.add_(1.0)
        h.sum().item()  # a value computed in the body: an error

    with pytest.raises(GradfuseError, match="computed in an ir_for body"):
        ir_for(range(2), fail)
    assert h.value is before


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.state = None

    def forward(self, x):  # noqa: ANN001, ANN201
        self.state = x if self.state is None else self.state + x
        return self.state


def test_a_module_attribute_is_carried() -> None:
    gradfuse.reset()
    counter, seen = Counter(), []
    counter(gradfuse.constant(np.full(2, 5.0, np.float32)))  # before the loop: 5

    def step() -> None:
        Receiver(lambda v: seen.append(float(v[0])), counter(gradfuse.constant([1.0, 1.0])))

    ir_for(range(3), step)
    execute(backend="reference")
    assert seen == [6.0, 7.0, 8.0]


def test_a_state_that_changes_shape_or_kind_is_an_error() -> None:
    gradfuse.reset()
    h = gradfuse.constant(np.zeros(2, np.float32))

    def grow() -> None:
        nonlocal h
        h = gradfuse.cat([h, h])

    with pytest.raises(GradfuseError, match="keeps its shape"):
        ir_for(range(2), grow)

    def to_pair() -> None:
        nonlocal h
        h = (h + 1.0, h + 2.0)

    with pytest.raises(GradfuseError, match="another kind of value"):
        ir_for(range(2), to_pair)
    assert "tg.for" not in gradfuse.ir_text()  # the failed loops are gone


def test_gradients_never_zeroed_are_an_error_at_the_backward() -> None:
    gradfuse.reset()
    model = nn.Linear(1, 1, bias=False)
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        x = Feeder(lambda: np.ones((1, 1), np.float32), shape=[1, 1])
        model(x).sum().backward()  # the line the error names
        opt.step()

    with pytest.raises(GradfuseError, match="gradient of 'weight' is not cleared") as err:
        ir_for(range(3), step)
    assert "test_loop_state.py" in str(err.value) and "backward()" in str(err.value)


@pytest.mark.parametrize("where", ["before", "after", "in_place"])
def test_gradients_cleared_before_backward_or_after_the_step_are_fine(where: str) -> None:
    gradfuse.reset()
    model = nn.Linear(1, 1, bias=False)
    model.weight.data[...] = 1.0
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        x = Feeder(lambda: np.ones((1, 1), np.float32), shape=[1, 1])
        if where == "before":
            opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        if where == "after":
            opt.zero_grad()
        if where == "in_place":
            model.weight.grad.zero_()

    ir_for(range(3), step)
    execute(backend="reference")
    assert model.weight.data[0, 0] == pytest.approx(0.7)  # three fresh gradients of 1


class MaskedScores(nn.Module):
    """word_language_model's TransformerModel's mask caching, as it writes it."""

    def __init__(self):
        super().__init__()
        self.src_mask = None
        self.proj = nn.Linear(4, 4)

    def _generate_square_subsequent_mask(self, sz: int):  # noqa: ANN202
        return gradfuse.log(gradfuse.tril(gradfuse.ones(sz, sz)))

    def forward(self, src):  # noqa: ANN001, ANN201
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
            self.src_mask = mask
        scores = self.proj(src) @ self.proj(src).t() + self.src_mask
        return scores.softmax(-1)


def test_a_constant_a_module_caches_in_the_loop_is_usable_after_it() -> None:
    gradfuse.reset()
    model = MaskedScores()
    opt = optim.SGD(model.parameters(), lr=0.1)
    xs = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)

    def step() -> None:
        x = Feeder(lambda: xs, shape=[3, 4])
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()

    ir_for(range(2), step)
    after: list[np.ndarray] = []
    Receiver(after.append, model(gradfuse.tensor(xs)))  # evaluation after training
    execute(backend="reference")
    np.testing.assert_array_equal(np.triu(after[0], 1), 0.0)  # the mask still applies
    np.testing.assert_allclose(after[0].sum(-1), 1.0, rtol=1e-6)
