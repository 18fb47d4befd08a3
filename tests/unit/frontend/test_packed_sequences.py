"""`gradfuse.nn.utils.rnn.pack_padded_sequence` / `pad_packed_sequence` through `LSTM`,
`GRU` and `RNN` against PyTorch's packed batches: outputs 0 after each sequence's end,
h_n from each sequence's last step, the reverse direction starting at each sequence's
own end, and the gradients of all that (training)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for, nn
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import GRU, LSTM, SGD, MSELoss

torch = pytest.importorskip("torch")

N, T, IN, H, LR = 3, 5, 3, 4, 0.1
# After the 10 training steps (parameters move by up to 9 % of their size), measured
# against PyTorch in float64: PyTorch float32 1.8e-7, gradfuse float32 (reference and c)
# 1.8e-7, and gradfuse to PyTorch in float32 7.1e-8. TRAIN_RTOL leaves a margin of 25x.
TRAIN_RTOL = 1e-5
LENGTHS = np.array([5, 3, 1])
LAYERS = {
    "lstm-2-bi": lambda nn: nn.LSTM(IN, H, 2, batch_first=True, bidirectional=True),
    "gru-bi": lambda nn: nn.GRU(IN, H, batch_first=True, bidirectional=True),
}


def pair(name: str) -> tuple[Any, Any]:
    torch.manual_seed(0)
    tmod = LAYERS[name](torch.nn)
    mod = LAYERS[name](gradfuse.nn)
    mod.load_state_dict(tmod.state_dict())
    return tmod, mod


def torch_run(tmod: Any, x: np.ndarray) -> list[Any]:
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        torch.tensor(x), torch.tensor(LENGTHS), batch_first=True
    )
    out, state = tmod(packed)
    padded, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    return [padded, *(state if isinstance(state, tuple) else (state,))]


def flat(out: Any, state: Any) -> list[Any]:
    return [out, *(state if isinstance(state, tuple) else (state,))]


def rel_err(got: np.ndarray, want: Any) -> float:
    want = np.asarray(want.detach().numpy(), np.float64)
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("lengths", ["tensor", "ints"])
@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_packed_layers_give_pytorchs_outputs(name: str, backend: str, lengths: str) -> None:
    tmod, mod = pair(name)
    x = np.random.default_rng(0).normal(size=(N, T, IN)).astype(np.float32)
    given: Any = LENGTHS.tolist()
    if lengths == "tensor":  # fed at run time, as a data loader's lengths are
        given = Feeder(lambda: LENGTHS.astype(np.float32), shape=[N], name="lengths")
    packed = nn.utils.rnn.pack_padded_sequence(
        Feeder(lambda: x, shape=x.shape), given, batch_first=True
    )
    out, state = mod(packed)
    padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
    got: list[np.ndarray] = []
    Receiver(lambda *a: got.extend(a), flat(padded, state))
    execute(backend=backend)
    want = torch_run(tmod, x)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    assert np.all(got[0][2, 1:] == 0.0) and np.all(got[0][1, 3:] == 0.0)  # after each end
    for g, w in zip(got, want):
        assert rel_err(g, w) < 1e-5  # as the unpacked layers (test_recurrent)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_training_through_packed_batches_gives_pytorchs_parameters(backend: str) -> None:
    """10 SGD steps of an MSE on the padded output: every parameter to TRAIN_RTOL."""
    tmod, mod = pair("lstm-2-bi")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, T, IN)).astype(np.float32)
    y = rng.normal(size=(N, T, 2 * H)).astype(np.float32)
    opt, loss_fn = SGD(mod.parameters(), lr=LR), MSELoss()

    def step() -> None:
        opt.zero_grad()
        packed = nn.utils.rnn.pack_padded_sequence(
            Feeder(lambda: x, shape=x.shape), LENGTHS, batch_first=True
        )
        out, _ = mod(packed)
        padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        loss_fn(padded, Feeder(lambda: y, shape=y.shape)).backward()
        opt.step()

    ir_for(range(10), step)
    execute(backend=backend)  # the final parameters are written back to the module
    got = mod.state_dict()
    topt = torch.optim.SGD(tmod.parameters(), lr=LR)
    for _ in range(10):
        topt.zero_grad()
        torch.nn.functional.mse_loss(torch_run(tmod, x)[0], torch.tensor(y)).backward()
        topt.step()
    for key, want in tmod.state_dict().items():
        assert rel_err(np.asarray(got[key], np.float64), want) < TRAIN_RTOL, key


def test_bad_lengths_are_errors_at_the_users_line() -> None:
    x = Feeder(lambda: np.zeros((N, T, IN), np.float32), shape=[N, T, IN])
    lstm = LSTM(IN, H, batch_first=True)
    for lengths, match in [
        ([1, 3, 5], "sorted in decreasing order"),
        ([6, 3, 1], r"in \[1, 5\]"),
        ([5, 3], "3 ints"),
    ]:
        with pytest.raises(GradfuseError, match=match) as info:
            nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        assert "test_packed_sequences.py" in str(info.value)
    packed = nn.utils.rnn.pack_padded_sequence(x, [1, 3, 5], batch_first=True, enforce_sorted=False)
    out, _ = GRU(IN, H)(packed)
    with pytest.raises(GradfuseError, match="total_length=7 must be the padded width 5"):
        nn.utils.rnn.pad_packed_sequence(out, total_length=7)
    with pytest.raises(GradfuseError, match="3 features, expected input_size 4"):
        LSTM(4, H)(packed)
    with pytest.raises(GradfuseError, match="expected a PackedSequence"):
        nn.utils.rnn.pad_packed_sequence(x)
    assert lstm.hidden_size == H


def test_the_traced_ir_keeps_the_state_after_each_end() -> None:
    """Golden lines of a packed RNN(1, 1) over lengths [3, 2] (traced, before any pass):
    the mask from the lengths, and in the time loop the new state where the mask holds,
    else the old one, the output 0; the padded output masked again after the loop."""
    x = Feeder(lambda: np.zeros((2, 3, 1), np.float32), shape=[2, 3, 1], name="x")
    rnn = gradfuse.nn.RNN(1, 1, bias=False)
    out, _ = rnn(nn.utils.rnn.pack_padded_sequence(x, [3, 2], batch_first=True))
    y, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
    Receiver(lambda v: None, y)
    lines = iter(gradfuse.ir_text().splitlines())
    for want in [
        "  %2 = tg.constant dense<[3.0, 2.0]> : tensor<2xf32>",
        "  %7 = tg.cmplt %5, %6 : tensor<3x2xi1>",
        "  %19, %20, %21 = tg.for %22 = 0 to 3 step 1 iter(%23 = %10, %24 = %16, %25 = %18)"
        " : tensor<2x1xf32>, tensor<1xf32>, tensor<3x2x1xf32> {",
        "    %37 = tg.tanh %36 : tensor<2x1xf32>",
        "    %39 = tg.cmplt %38, %33 : tensor<2x1xi1>",
        "    %40 = tg.where %39, %37, %23 : tensor<2x1xf32>",
        "    %42 = tg.where %39, %40, %41 : tensor<2x1xf32>",
        "    tg.yield %40, %44, %49",
        "  %54 = tg.where %52, %21, %53 : tensor<3x2x1xf32>",
    ]:
        assert any(line == want for line in lines), want  # in this order
