"""`Embedding`: rows of a table looked up by integer ids (`tg.gather`), PyTorch's layout.

emb = Embedding(1000, 64)
h = emb(tokens)          # tokens: [N, L] floats holding ids -> [N, L, 64]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradfuse.frontend.id_ranges import check_fed_ids
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import device_and_dtype, only
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error, rng
from gradfuse.frontend.tensor import Tensor


class Embedding(Module):
    """A table `weight` [num_embeddings, embedding_dim], initialised N(0, 1) like PyTorch.

    Its gradient is a `tg.scatter_add` of the output gradient into the used rows.
    `Embedding(100, 16)(ids)` maps ids [N, L] to [N, L, 16]. Ids read from a
    `Feeder` (through views) are checked on the host each time it is called: an id
    that is not an integer in [0, num_embeddings) stops the run with an error naming
    the feeder (see `gradfuse.frontend.id_ranges`); other ids are not checked.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Any = None,
        _freeze: bool = False,
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__()
        for name, value, default in (
            ("padding_idx", padding_idx, None),
            ("max_norm", max_norm, None),
            ("scale_grad_by_freq", scale_grad_by_freq, False),
            ("sparse", sparse, False),
            ("_freeze", _freeze, False),
        ):
            only("Embedding", name, value, default)
        device_and_dtype("Embedding", device, dtype)
        if num_embeddings <= 0 or embedding_dim <= 0:
            raise error(
                f"Embedding: sizes must be positive, got {num_embeddings} x {embedding_dim}"
            )
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if _weight is None:
            table = rng().standard_normal((num_embeddings, embedding_dim))
        else:
            table = np.asarray(_weight.detach().numpy() if hasattr(_weight, "detach") else _weight)
            if table.shape != (num_embeddings, embedding_dim):
                raise error(
                    f"Embedding: _weight has shape {list(table.shape)},"
                    f" expected {[num_embeddings, embedding_dim]}"
                )
        self.weight = Parameter(table.astype(np.float32))

    def forward(self, ids: Tensor) -> Tensor:
        return _lookup(ids, self.weight, f"Embedding({self.extra_repr()})")

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


def _lookup(ids: Tensor, weight: Tensor, what: str) -> Tensor:
    """The rows of `weight` at `ids` (`tg.gather`); fed ids are checked on the host."""
    n, dim = ids.numel(), weight.shape[1]
    index = ids.reshape(n, 1).broadcast_to([n, dim])
    rows = weight.gather(0, index)
    check_fed_ids(index, weight.shape[0], "token id", what, "ids")
    return rows.reshape(list(ids.shape) + [dim])


def embedding(
    input: Tensor, weight: Tensor, padding_idx: int | None = None,
    max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:  # fmt: skip
    """`F.embedding`: the rows of the table `weight` [N, D] at the ids `input` (PyTorch's
    arguments; those that change the result other than the defaults are an error)."""
    if padding_idx is not None:
        raise error("embedding: padding_idx is not supported by gradfuse")
    only("embedding", "max_norm", max_norm, None)
    only("embedding", "scale_grad_by_freq", scale_grad_by_freq, False)
    only("embedding", "sparse", sparse, False)
    if weight.ndim != 2:
        raise error(f"embedding: weight must be a matrix, got shape {list(weight.shape)}")
    return _lookup(input, weight, f"embedding({weight.shape[0]}, {weight.shape[1]})")
