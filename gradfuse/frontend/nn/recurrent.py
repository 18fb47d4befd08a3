"""`RNN`, `GRU` and `LSTM` as in PyTorch: arguments, `state_dict` names and layouts,
shapes of `(output, h_n)` / `(output, (h_n, c_n))`, built on `gradfuse.scan`.

Each layer and direction is one `tg.for` over the time steps (never unrolled): as in
cuDNN, the input projection of all steps is one matmul before the loop and only the
recurrent part runs inside it; the backward direction is a `scan(..., reverse=True)`.

    lstm = LSTM(10, 20, num_layers=2, batch_first=True, bidirectional=True)
    out, (h_n, c_n) = lstm(x)         # x [N, T, 10] -> out [N, T, 40], h_n [4, N, 20]
    out, _ = lstm(nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True))
    sorted(lstm.state_dict())[:2]     # ['bias_hh_l0', 'bias_hh_l0_reverse']

records per layer and direction

    %gi = tg.dot %x, %w_ih_t ...                          (all T steps at once)
    %h, %c, %t, %hs = tg.for %i = 0 to T step 1 iter(...) { <lstm_step on gi[t]> }
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from gradfuse.dialects.tg_base import fmt_shape
from gradfuse.frontend import functional as F
from gradfuse.frontend.loops import scan
from gradfuse.frontend.nn.layers import uniform
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype
from gradfuse.frontend.nn.recurrent_cells import (
    GATES,
    State,
    check_features,
    check_state,
    step,
    zeros,
)
from gradfuse.frontend.nn.rnn_utils import PackedSequence
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where


class _RNNBase(Module):
    """The parameters, checks and layer/direction loops of `RNN`, `GRU` and `LSTM`; the
    constructor is `LSTM`'s (PyTorch's), the others pass `proj_size=0`."""

    MODE: ClassVar[str]  # a key of `GATES`

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        what = type(self).__name__
        device_and_dtype(what, device, dtype)
        if proj_size:
            raise error(f"{what}: proj_size={proj_size} is not supported by gradfuse (only 0)")
        if not isinstance(dropout, int | float) or not 0.0 <= dropout <= 1.0:
            raise error(f"{what}: dropout should be a number in [0, 1], got {dropout!r}")
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(value, int) or value <= 0:
                raise error(f"{what}: {name} must be a positive int, got {value!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise error(f"{what}: num_layers must be a positive int, got {num_layers!r}")
        self.mode, self.input_size, self.hidden_size = self.MODE, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        rows, bound = GATES[self.mode] * hidden_size, 1.0 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size * self.directions
            for suffix in self.suffixes:
                setattr(self, f"weight_ih_l{layer}{suffix}", uniform(bound, (rows, width)))
                setattr(self, f"weight_hh_l{layer}{suffix}", uniform(bound, (rows, hidden_size)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", uniform(bound, (rows,)))
                    setattr(self, f"bias_hh_l{layer}{suffix}", uniform(bound, (rows,)))

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    def _weights(self, name: str) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """w_ih, w_hh, b_ih, b_hh of layer and direction `name` ("l0", "l1_reverse")."""
        p = self._parameters
        return (
            p[f"weight_ih_{name}"], p[f"weight_hh_{name}"],
            p.get(f"bias_ih_{name}"), p.get(f"bias_hh_{name}"),
        )  # fmt: skip

    def _check_input(self, input: Any) -> None:
        what = type(self).__name__
        batch = "[N, T, I]" if self.batch_first else "[T, N, I]"
        if not isinstance(input, Tensor) or input.ndim not in (2, 3):
            got = fmt_shape(input.shape) if isinstance(input, Tensor) else type(input).__name__
            raise error(f"{what}: expected an input [T, I] or a batch {batch}, got {got}")
        check_features(what, input, self.input_size, f", batch_first={self.batch_first}")

    def _initial(self, hx: Any, batch: int, batched: bool) -> list[list[Tensor]]:
        """Per state (h, and c for LSTMs) the [N, H] initial tensor of each layer and
        direction, in PyTorch's order (layer * directions + direction)."""
        what = type(self).__name__
        count = self.num_layers * self.directions
        full = (count, batch, self.hidden_size)
        names = ("h_0", "c_0") if self.mode == "LSTM" else ("h_0",)
        if hx is None:
            return [[zeros(full[1:]) for _ in range(count)] for _ in names]
        given = hx if self.mode == "LSTM" else (hx,)
        if not isinstance(given, tuple | list) or len(given) != len(names):
            raise error(f"{what}: hx must be a pair (h_0, c_0) of tensors")
        want = full if batched else (count, self.hidden_size)
        out = []
        for name, t in zip(names, given):
            check_state(what, name, t, want)
            t = t if batched else t.reshape(*full)
            out.append([t[k] for k in range(count)])
        return out

    def _run(self, input: Tensor | PackedSequence, hx: Any) -> tuple[Any, Any]:
        packed = input if isinstance(input, PackedSequence) else None
        if packed is not None:  # [T, N, I] whatever batch_first says, as in PyTorch
            x, mask, batched = packed.data, packed.mask, True
            if x.ndim != 3:
                raise error(f"{type(self).__name__}: a packed batch must be [T, N, I]")
            check_features(type(self).__name__, x, self.input_size, " (packed)")
        else:
            self._check_input(input)
            batched, mask = input.ndim == 3, None
            x = input if batched else input.reshape(input.shape[0], 1, self.input_size)
            if batched and self.batch_first:
                x = x.transpose(0, 1)
        batch = x.shape[1]
        initial = self._initial(hx, batch, batched)
        finals: list[list[Tensor]] = [[] for _ in initial]
        for layer in range(self.num_layers):
            if layer and self.training and self.dropout:
                x = F.dropout(x, self.dropout, True)
            outs = []
            for d, suffix in enumerate(self.suffixes):
                k = layer * self.directions + d
                state = [s[k] for s in initial]
                last, ys = self._direction(x, f"l{layer}{suffix}", state, d == 1, mask)
                outs.append(ys)
                for f, t in zip(finals, last):
                    f.append(t)
            x = F.cat(outs, 2)
        count, hidden = self.num_layers * self.directions, self.hidden_size
        stacked = [F.stack(f) for f in finals]
        if not batched:
            x = x.reshape(x.shape[0], x.shape[2])
            stacked = [s.reshape(count, hidden) for s in stacked]
        elif self.batch_first and packed is None:
            x = x.transpose(0, 1)
        state = tuple(stacked) if self.mode == "LSTM" else stacked[0]
        if packed is not None:
            return PackedSequence(x, packed.mask, packed.lengths), state
        return x, state

    def _direction(
        self, x: Tensor, name: str, state: list[Tensor], reverse: bool, mask: Tensor | None
    ) -> tuple[list[Tensor], Tensor]:
        """One layer in one direction over x [T, N, I]: its final states and outputs
        [T, N, H] (in time order for both directions). Where `mask` [T, N, 1] is 0 (after
        a packed sequence's end) the state is kept and the output is 0."""
        w_ih, w_hh, b_ih, b_hh = self._weights(name)
        if self.mode != "GRU" and b_ih is not None and b_hh is not None:
            b_ih, b_hh = b_ih + b_hh, None  # both biases before the loop (GRU's b_hn can't)
        gi = F.linear(x, w_ih, b_ih)  # every time step in one matmul
        mode = self.mode

        def body(carry: State, xs: tuple[Tensor, ...]) -> tuple[State, Tensor]:
            new = step(mode, xs[0], carry if mode == "LSTM" else carry[0], w_hh, b_hh)
            now = tuple(new) if mode == "LSTM" else (new,)
            if len(xs) > 1:
                on = xs[1] > 0.5
                now = tuple(where(on, n, c) for n, c in zip(now, carry))
                return now, where(on, now[0], 0.0)
            return now, now[0]

        xs = (gi,) if mask is None else (gi, mask.broadcast_to((*gi.shape[:2], self.hidden_size)))
        last, ys = scan(body, tuple(state), xs, reverse=reverse)
        return list(last), ys

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for name, default in (("bias", True), ("batch_first", False), ("dropout", 0.0)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s + (", bidirectional=True" if self.bidirectional else "")


class RNN(_RNNBase):
    """PyTorch's `RNN`: h_t = tanh(x_t @ W_ih.T + b_ih + h_{t-1} @ W_hh.T + b_hh) (or relu),
    stacked `num_layers` deep. `out, h_n = RNN(10, 20, 2, nonlinearity="relu")(x)`"""

    MODE = "RNN_TANH"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: Any = None,
        dtype: Any = None,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise error(f"RNN: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__(
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
            0, device, dtype,
        )  # fmt: skip
        self.nonlinearity = nonlinearity
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"  # one gate either way

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self._run(input, hx)


class GRU(_RNNBase):
    """PyTorch's `GRU` (gates r, z, n; n = tanh(W_in x + b_in + r (W_hn h + b_hn))).

    `out, h_n = GRU(10, 20, batch_first=True)(x)`: x [N, T, 10], out [N, T, 20]
    """

    MODE = "GRU"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__(
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
            0, device, dtype,
        )  # fmt: skip

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self._run(input, hx)


class LSTM(_RNNBase):
    """PyTorch's `LSTM` (gates i, f, g, o); `proj_size` must be 0.

    `out, (h_n, c_n) = LSTM(10, 20, num_layers=2, bidirectional=True)(x, (h_0, c_0))`
    """

    MODE = "LSTM"

    def forward(
        self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        return self._run(input, hx)


__all__ = ["RNN", "GRU", "LSTM"]
