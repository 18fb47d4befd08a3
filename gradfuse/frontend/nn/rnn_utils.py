"""`gradfuse.nn.utils.rnn` (PyTorch's `torch.nn.utils.rnn`): batches of sequences of
different lengths for `RNN`, `GRU` and `LSTM`.

    packed = pack_padded_sequence(x, lengths, batch_first=True)   # x [N, T, I]
    out, (h_n, c_n) = lstm(packed)                                # out: a PackedSequence
    y, lengths = pad_packed_sequence(out, batch_first=True)       # y [N, T, 2H], 0 after each end

The layers then compute what PyTorch computes for a packed batch: each sequence stops at
its length (h_n is the state after its last step), a reverse direction starts at each
sequence's own last step, and the outputs after the end are `padding_value`.

Shapes are static in gradfuse, so a `PackedSequence` keeps the padded batch: `data` is
[T, N, *] (time first) and `mask` [T, N, 1] is 1.0 at the steps that are in a sequence
(PyTorch's `data` is the valid steps only, [sum(lengths), *]). `lengths` may be a
tensor, such as a `Feeder`'s (it changes from step to step; nothing is recompiled), or
Python ints. The recurrent layers keep their state where the mask is 0:

    %h2 = tg.where %m, %h_new, %h : tensor<4x256xf32>     (inside the time loop)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gradfuse.frontend.functional import constant
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor, where


@dataclass(frozen=True)
class PackedSequence:
    """A padded batch with the lengths of its sequences (see the module docstring):
    `data` [T, N, *], `mask` [T, N, 1] (1.0 inside a sequence, else 0.0)."""

    data: Tensor
    mask: Tensor
    lengths: Tensor | tuple[int, ...]


def _lengths(what: str, lengths: object, batch: int, steps: int, sort: bool) -> Tensor:
    """The lengths as a float32 [N] tensor; Python ints are checked against the batch."""
    if isinstance(lengths, Tensor):
        if lengths.shape != (batch,):
            raise error(
                f"{what}: lengths must be [{batch}] (one per sequence), got {list(lengths.shape)}"
            )
        return lengths if lengths.dtype == np.float32 else lengths.float()
    values = np.asarray(lengths)
    if values.shape != (batch,) or values.dtype.kind not in "iu":
        raise error(f"{what}: lengths must be {batch} ints (one per sequence), got {lengths!r}")
    if values.min() < 1 or values.max() > steps:
        raise error(f"{what}: every length must be in [1, {steps}], got {values.tolist()}")
    if sort and np.any(np.diff(values) > 0):
        raise error(
            f"{what}: lengths must be sorted in decreasing order when enforce_sorted is True,"
            f" got {values.tolist()} (or pass enforce_sorted=False)"
        )
    return constant(values.astype(np.float32))


def pack_padded_sequence(
    input: Tensor,
    lengths: Tensor | Sequence[int],
    batch_first: bool = False,
    enforce_sorted: bool = True,
) -> PackedSequence:
    """Marks the first `lengths[n]` steps of each sequence n of a padded batch as valid
    (`input` [T, N, *], or [N, T, *] with `batch_first`). `enforce_sorted` checks that
    Python-int lengths decrease, as PyTorch does; tensor lengths are not checked."""
    what = "pack_padded_sequence"
    if not isinstance(input, Tensor) or input.ndim < 2:
        raise error(f"{what}: input must be a padded batch [T, N, *] or [N, T, *], got {input!r}")
    data = input.transpose(0, 1) if batch_first else input
    steps, batch = data.shape[0], data.shape[1]
    n = _lengths(what, lengths, batch, steps, enforce_sorted)
    ids = constant(np.arange(steps, dtype=np.float32).reshape(steps, 1))
    mask = (ids < n.reshape(1, batch)).float().reshape(steps, batch, 1)
    kept = lengths if isinstance(lengths, Tensor) else tuple(int(v) for v in lengths)
    return PackedSequence(data, mask, kept)


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple[Tensor, Tensor | tuple[int, ...]]:
    """The padded batch of `sequence` ([T, N, *], or [N, T, *] with `batch_first`) with
    `padding_value` after each sequence's end, and the lengths. T stays the padded width
    (shapes are static); `total_length`, when given, must be that width."""
    if not isinstance(sequence, PackedSequence):
        raise error(
            f"pad_packed_sequence: expected a PackedSequence, got {type(sequence).__name__}"
        )
    steps = sequence.data.shape[0]
    if total_length is not None and total_length != steps:
        raise error(
            f"pad_packed_sequence: total_length={total_length} must be the padded width"
            f" {steps} (gradfuse keeps static shapes)"
        )
    out = where(sequence.mask > 0.5, sequence.data, float(padding_value))
    return (out.transpose(0, 1) if batch_first else out), sequence.lengths


__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence"]
