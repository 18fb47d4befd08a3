"""`gradfuse.linalg`: PyTorch's `torch.linalg` norms and products that are composites of
tg ops (`tensor_reduce.norm`, `tensor_linalg`):

    gradfuse.linalg.vector_norm(x, dim=1)       # the 2-norm of each row (0-safe gradient)
    gradfuse.linalg.norm(w)                     # the Frobenius norm of all elements
    gradfuse.linalg.cross(a, b)                 # along the last dim
"""

from __future__ import annotations

from collections.abc import Sequence

from gradfuse.frontend import tensor_linalg as _L
from gradfuse.frontend.recorder import error as _error
from gradfuse.frontend.tensor import Tensor

__all__ = ["cross", "matrix_norm", "norm", "vecdot", "vector_norm"]

Dims = int | Sequence[int] | None


def vector_norm(x: Tensor, ord: float = 2, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """The `ord`-norm (1, 2 or inf) over `dim` (all elements when None)."""
    return x.norm(ord, dim, keepdim)


def matrix_norm(x: Tensor, ord: str = "fro", dim: tuple[int, int] = (-2, -1), keepdim: bool = False) -> Tensor:  # noqa: A002, E501
    """The Frobenius norm of the matrices in the last two dims (or `dim`)."""
    if ord != "fro":
        raise _error(f"linalg.matrix_norm: only ord='fro' is supported, got {ord!r}")
    return x.norm("fro", list(dim), keepdim)


def norm(x: Tensor, ord: float | str | None = None, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A002, E501
    """With `ord` None, the 2-norm of all elements (or over `dim`), as PyTorch's (the
    Frobenius norm of a matrix); a number is `vector_norm`'s, "fro" `matrix_norm`'s."""
    if ord is None or ord == "fro":
        return x.norm("fro", dim, keepdim)
    if isinstance(ord, str):
        raise _error(f"linalg.norm: ord must be None, 'fro', 1, 2 or inf, got {ord!r}")
    return vector_norm(x, ord, dim, keepdim)


def cross(a: Tensor, b: Tensor, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along `dim` (the last unless given)."""
    return _L.cross(a, b, dim)


def vecdot(a: Tensor, b: Tensor, dim: int = -1) -> Tensor:
    """The sum of `a * b` along `dim`."""
    return (a * b).sum(dim)
