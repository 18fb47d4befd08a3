"""`RNNCell`, `GRUCell`, `LSTMCell` as in PyTorch, and the step functions `RNN`, `GRU`
and `LSTM` run in their `gradfuse.scan` loops.

Parameters are PyTorch's: `weight_ih` [gates * hidden, input], `weight_hh`
[gates * hidden, hidden], `bias_ih`, `bias_hh` [gates * hidden], all drawn from
U(-1/sqrt(hidden), 1/sqrt(hidden)); gates i, f, g, o (LSTM) and r, z, n (GRU):

    cell = LSTMCell(10, 20)
    h, c = cell(x, (h, c))                      # x: [N, 10] (or [10]), h, c: [N, 20]
    h, hs = gradfuse.scan(lambda h, x: (gru_cell(x, h),) * 2, h0, xs)  # one tg.for

A step adds the recurrent matmul to `gi`, the input's projection (`x @ W_ih.T + b_ih`,
computed by the layers for all time steps at once, before the loop):

    %gh = tg.dot %h, %w_hh_t ; %g = tg.add %gi, %gh ; tg.tanh %g    (RNNCell, tanh)
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend.functional import constant, linear
from gradfuse.frontend.nn.layers import uniform
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
"""Gates per mode: the weights are [GATES[mode] * hidden_size, ...]."""

State = Any  # a tensor h, or a pair (h, c) for LSTMs


def chunk(g: Tensor, k: int, hidden: int) -> Tensor:
    """Gate `k` of `g` [..., gates * hidden]: `g[..., k*hidden:(k+1)*hidden]`."""
    return g[..., k * hidden : (k + 1) * hidden]


def recurrent(h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """`h @ w_hh.T + b_hh`: the part of the gates that depends on the state."""
    return linear(h, w_hh, b_hh)


def rnn_step(mode: str, gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """h' = tanh(gi + h @ W_hh.T + b_hh) (relu for `RNN_RELU`)."""
    pre = gi + recurrent(h, w_hh, b_hh)
    return pre.relu() if mode == "RNN_RELU" else pre.tanh()


def lstm_step(
    gi: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor, b_hh: Tensor | None
) -> tuple[Tensor, Tensor]:
    """(h', c') with i, f, g, o = chunks of gi + h @ W_hh.T + b_hh;
    c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c')."""
    h, c = state
    n = h.shape[-1]
    g = gi + recurrent(h, w_hh, b_hh)
    i, f = chunk(g, 0, n).sigmoid(), chunk(g, 1, n).sigmoid()
    c2 = f * c + i * chunk(g, 2, n).tanh()
    return chunk(g, 3, n).sigmoid() * c2.tanh(), c2


def gru_step(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """h' = (1 - z) n + z h with r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
    n = tanh(gi_n + r gh_n), gh = h @ W_hh.T + b_hh (b_hn stays inside r's product)."""
    n = h.shape[-1]
    gh = recurrent(h, w_hh, b_hh)
    r = (chunk(gi, 0, n) + chunk(gh, 0, n)).sigmoid()
    z = (chunk(gi, 1, n) + chunk(gh, 1, n)).sigmoid()
    new = (chunk(gi, 2, n) + r * chunk(gh, 2, n)).tanh()
    return (1.0 - z) * new + z * h


def step(mode: str, gi: Tensor, state: State, w_hh: Tensor, b_hh: Tensor | None) -> State:
    """One time step of `mode` (a key of `GATES`) from the input projection `gi`."""
    if mode == "LSTM":
        return lstm_step(gi, state, w_hh, b_hh)
    if mode == "GRU":
        return gru_step(gi, state, w_hh, b_hh)
    return rnn_step(mode, gi, state, w_hh, b_hh)


def zeros(shape: tuple[int, ...]) -> Tensor:
    """A float32 constant of zeros (the default initial state)."""
    return constant(np.zeros(shape, np.float32))


def check_features(what: str, input: Tensor, input_size: int, detail: str = "") -> None:
    """Raises at the user's line unless `input`'s last dim is `input_size`."""
    if input.shape[-1] != input_size:
        raise error(
            f"{what}: input has {input.shape[-1]} features, expected input_size"
            f" {input_size} (input {fmt_shape(input.shape)}{detail})"
        )


def check_state(what: str, name: str, t: Any, want: tuple[int, ...]) -> None:
    """Raises at the user's line unless `t` is a tensor of shape `want`."""
    if not isinstance(t, Tensor):
        raise error(f"{what}: {name} must be a tensor, got {type(t).__name__}")
    if tuple(t.shape) != want:
        raise error(f"{what}: expected {name} of shape {fmt_shape(want)}, got {fmt_shape(t.shape)}")


class _CellBase(Module):
    """The parameters and input checks shared by the three cells; the constructor is
    `GRUCell`'s and `LSTMCell`'s (PyTorch's)."""

    MODE: ClassVar[str]  # a key of `GATES`

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        self.mode = self.MODE
        what = type(self).__name__
        device_and_dtype(what, device, dtype)
        if input_size <= 0 or hidden_size <= 0:
            raise error(f"{what}: input_size and hidden_size must be positive")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        rows, bound = GATES[self.mode] * hidden_size, 1.0 / math.sqrt(hidden_size)
        self.weight_ih = uniform(bound, (rows, input_size))
        self.weight_hh = uniform(bound, (rows, hidden_size))
        self.bias_ih: Parameter | None = uniform(bound, (rows,)) if bias else None
        self.bias_hh: Parameter | None = uniform(bound, (rows,)) if bias else None

    def _run(self, input: Tensor, hx: State) -> State:
        what = type(self).__name__
        if not isinstance(input, Tensor) or input.ndim not in (1, 2):
            got = fmt_shape(input.shape) if isinstance(input, Tensor) else type(input).__name__
            raise error(f"{what}: expected a 1-d or 2-d input, got {got}")
        check_features(what, input, self.input_size)
        batched = input.ndim == 2
        x = input if batched else input.reshape(1, self.input_size)
        shape = (x.shape[0], self.hidden_size)
        want = shape if batched else (self.hidden_size,)
        names = ("hx", "cx") if self.mode == "LSTM" else ("hx",)
        if hx is None:
            parts = [zeros(shape) for _ in names]
        else:
            given = hx if self.mode == "LSTM" else (hx,)
            if not isinstance(given, tuple | list) or len(given) != len(names):
                raise error(f"{what}: hx must be a pair (h, c) of tensors")
            for name, t in zip(names, given):
                check_state(what, name, t, want)
            parts = [t if batched else t.reshape(*shape) for t in given]
        state = tuple(parts) if self.mode == "LSTM" else parts[0]
        gi = linear(x, self.weight_ih, self.bias_ih)
        out = step(self.mode, gi, state, self.weight_hh, self.bias_hh)
        if batched:
            return out
        if self.mode == "LSTM":
            return tuple(t.reshape(self.hidden_size) for t in out)
        return out.reshape(self.hidden_size)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """h' = tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh) (or relu), PyTorch's `RNNCell`.

    `RNNCell(10, 20, nonlinearity="relu")(x, h)`: x [N, 10], h [N, 20] (zeros if None).
    """

    MODE = "RNN_TANH"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: Any = None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise error(f"RNNCell: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"  # one gate either way

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._run(input, hx)


class GRUCell(_CellBase):
    """PyTorch's `GRUCell` (gates r, z, n). `h2 = GRUCell(10, 20)(x, h)`"""

    MODE = "GRU"

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._run(input, hx)


class LSTMCell(_CellBase):
    """PyTorch's `LSTMCell` (gates i, f, g, o). `h2, c2 = LSTMCell(10, 20)(x, (h, c))`"""

    MODE = "LSTM"

    def forward(
        self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        return self._run(input, hx)
