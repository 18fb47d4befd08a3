"""PyTorch's products, diagonals and index selections that are composites of tg ops, as
`Tensor` methods (and `gradfuse.*` functions):

    gradfuse.outer(t, inv_freq)      # t[:, None] * inv_freq[None, :]
    gradfuse.addmm(b, x, w.t())      # b + x @ w.T (tg.dot)
    x.diagonal(), x.trace()          # tg.gather at (i, i + offset) along the last dim
    x.index_select(1, ids)           # tg.gather at ids, broadcast along the other dims
    x.index_add(0, ids, rows)        # x + tg.scatter_add of rows at ids
    gradfuse.cdist(a, b)             # the 2-norm of a[:, None] - b[None] (0-safe gradient)

Gathers and scatters take integer indices held as floats (gradfuse's index tensors), and
their gradients are the scatter or gather back, as PyTorch's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import SSAValue

from gradfuse.dialects import tg
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import emit, error
from gradfuse.frontend.tensor_methods import _in_place

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor

F32 = Float32Type()


def _tensors(what: str, *xs: object) -> None:
    """An error unless each of `xs` is a Tensor (a number or a list where a tensor goes):
    a value standing for an SSA value (this module cannot import `Tensor`'s)."""
    for x in xs:
        if not isinstance(getattr(x, "value", None), SSAValue):
            raise error(f"{what}: expected a Tensor, got {type(x).__name__}")


def _rank(what: str, x: Tensor, *ranks: int) -> None:
    _tensors(what, x)
    if x.ndim not in ranks:
        want = " or ".join(map(str, ranks))
        raise error(f"{what}: expects a tensor of rank {want}, got shape {list(x.shape)}")


def _const(x: Tensor, array: np.ndarray) -> Tensor:
    """A constant of `array` (an index or a mask) in the recorded program."""
    return x._new(B.dense(np.asarray(array, np.float32), F32))


# --- products ---------------------------------------------------------------------------------


def outer(a: Tensor, b: Tensor) -> Tensor:
    """`a[i] * b[j]` of two vectors."""
    _rank("outer", a, 1)
    _rank("outer", b, 1)
    return a.unsqueeze(1) * b.unsqueeze(0)


def dot(a: Tensor, b: Tensor) -> Tensor:
    """The sum of `a * b` of two vectors of one length."""
    _rank("dot", a, 1)
    _rank("dot", b, 1)
    if a.shape != b.shape:
        raise error(f"dot: vectors of lengths {a.shape[0]} and {b.shape[0]}")
    return (a.unsqueeze(0) @ b.unsqueeze(1)).reshape([])


def mv(m: Tensor, v: Tensor) -> Tensor:
    """A matrix times a vector."""
    _rank("mv", m, 2)
    _rank("mv", v, 1)
    return (m @ v.unsqueeze(1)).squeeze(1)


def _add_scaled(x: Tensor, product: Tensor, beta: float, alpha: float) -> Tensor:
    """`beta * x + alpha * product`; `beta` 0 ignores x (its NaN too, as PyTorch's)."""
    scaled = product * alpha if alpha != 1 else product
    if beta == 0:
        return scaled.broadcast_to(list(np.broadcast_shapes(x.shape, scaled.shape)))
    return (x * beta if beta != 1 else x) + scaled


def addmm(x: Tensor, m1: Tensor, m2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """`beta * x + alpha * (m1 @ m2)`."""
    _rank("addmm", m1, 2)
    _rank("addmm", m2, 2)
    return _add_scaled(x, m1 @ m2, beta, alpha)


def addmv(x: Tensor, m: Tensor, v: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """`beta * x + alpha * (m @ v)`."""
    return _add_scaled(x, mv(m, v), beta, alpha)


def baddbmm(x: Tensor, b1: Tensor, b2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """`beta * x + alpha * bmm(b1, b2)`."""
    return _add_scaled(x, b1.bmm(b2), beta, alpha)


def addbmm(x: Tensor, b1: Tensor, b2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """`beta * x + alpha * bmm(b1, b2).sum(0)`."""
    return _add_scaled(x, b1.bmm(b2).sum(0), beta, alpha)


def tensordot(a: Tensor, b: Tensor, dims: int | Sequence[Sequence[int]] = 2) -> Tensor:
    """The sum over `dims` of a's and b's (their last n and first n when an int): a's
    other dims first, then b's; one tg.dot of the two reshaped to matrices."""
    _tensors("tensordot", a, b)
    if isinstance(dims, int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da = [B.normalize_dims(d, a.ndim, "tensordot")[0] for d in da]  # in order: paired with db
    db = [B.normalize_dims(d, b.ndim, "tensordot")[0] for d in db]
    if [a.shape[d] for d in da] != [b.shape[d] for d in db]:
        raise error(f"tensordot: contracted sizes {[a.shape[d] for d in da]} and {[b.shape[d] for d in db]} differ")  # fmt: skip
    ka, kb = [d for d in range(a.ndim) if d not in da], [d for d in range(b.ndim) if d not in db]
    k = int(np.prod([a.shape[d] for d in da]))
    left = a.permute([*ka, *da]).reshape(-1, k)
    right = b.permute([*db, *kb]).reshape(k, -1)
    return (left @ right).reshape([*(a.shape[d] for d in ka), *(b.shape[d] for d in kb)])


def kron(a: Tensor, b: Tensor) -> Tensor:
    """The Kronecker product: `a[i] * b` in block i (ranks evened with leading 1s)."""
    _tensors("kron", a, b)
    n = max(a.ndim, b.ndim)
    a = a.reshape([1] * (n - a.ndim) + list(a.shape))
    b = b.reshape([1] * (n - b.ndim) + list(b.shape))
    spread_a = a.reshape([d for s in a.shape for d in (s, 1)])
    spread_b = b.reshape([d for s in b.shape for d in (1, s)])
    return (spread_a * spread_b).reshape([p * q for p, q in zip(a.shape, b.shape, strict=True)])


def cross(a: Tensor, b: Tensor, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along `dim` (None: the first dim of size 3)."""
    _tensors("cross", a, b)
    if dim is None:
        dim = next((d for d, n in enumerate(a.shape) if n == 3), -1)
    d = B.normalize_dims(dim, a.ndim, "cross")[0]
    if a.shape[d] != 3 or b.shape[d] != 3:
        raise error(f"cross: dim {d} must have size 3, got {a.shape[d]} and {b.shape[d]}")
    head = [slice(None)] * d
    x, y = ([t[(*head, slice(k, k + 1))] for k in range(3)] for t in (a, b))
    parts = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]
    return a._new(B.concat([p.value for p in parts], d))


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0) -> Tensor:
    """The `p`-norm distance of each row of x1 to each row of x2 (batched over leading
    dims): `(x1[..., :, None, :] - x2[..., None, :, :]).norm(p, -1)`, whose gradient at a
    distance of 0 is 0, as PyTorch's."""
    _tensors("cdist", x1, x2)
    return (x1.unsqueeze(-2) - x2.unsqueeze(-3)).norm(p, -1)


# --- diagonals ------------------------------------------------------------------------------


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The elements at (i, i + offset) of dims `dim1`, `dim2`, as the last dim: those two
    dims moved last, then one `tg.gather` along the last."""
    (d1,), (d2,) = (B.normalize_dims(d, x.ndim, "diagonal") for d in (dim1, dim2))
    if d1 == d2:
        raise error(f"diagonal: dim1 and dim2 are the same dim, {d1}")
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    m = x.permute([*rest, d1, d2])
    rows, cols = m.shape[-2:]
    first = max(0, -offset)
    n = max(0, min(rows - first, cols - max(0, offset)))
    if n == 0:
        raise error(f"diagonal: offset {offset} leaves no element of a {rows} x {cols} matrix")
    m = m[(..., slice(first, first + n), slice(None))]
    index = np.arange(n, dtype=np.float32).reshape(n, 1) + max(0, offset)
    at = _const(x, index).broadcast_to([*m.shape[:-1], 1])
    return m.gather(-1, at).squeeze(-1)


def diag(x: Tensor, diagonal_: int = 0) -> Tensor:
    """A vector's diagonal matrix (the vector on diagonal `diagonal_`), or a matrix's
    diagonal (`diagonal()`)."""
    _rank("diag", x, 1, 2)
    if x.ndim == 2:
        return diagonal(x, diagonal_)
    n, k = x.shape[0], abs(diagonal_)
    size = n + k
    grid = np.zeros((size, n), np.float32)  # column j: x[j] at row j (+ -diagonal_)
    grid[np.arange(n) + max(0, -diagonal_), np.arange(n)] = 1.0
    placed = x._where(_const(x, grid) > 0.5, x.unsqueeze(0).broadcast_to([size, n]), 0.0)
    low, high = max(0, diagonal_), max(0, -diagonal_)  # the columns before and after
    return placed._new(B.pad(placed.value, [0, low], [0, high]))


def trace(x: Tensor) -> Tensor:
    """The sum of a matrix's diagonal."""
    _rank("trace", x, 2)
    return diagonal(x).sum()


def triangle(x: Tensor, diagonal_: int, upper: bool) -> Tensor:
    """`x` on and above (`upper`) or on and below `diagonal_` of its last two dims, 0
    elsewhere (a mask's zeros stay 0, -inf too)."""
    if x.ndim < 2:
        raise error(f"{'triu' if upper else 'tril'}: expects a matrix (rank >= 2), got shape {list(x.shape)}")  # fmt: skip
    n, m = x.shape[-2:]
    keep = np.triu(np.ones((n, m)), diagonal_) if upper else np.tril(np.ones((n, m)), diagonal_)
    return x._where(x._new(B.dense(keep, Float64Type())) > 0.5, x, 0.0)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """`x` on and above the `diagonal`, 0 below."""
    return triangle(x, diagonal, upper=True)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """`x` on and below the `diagonal`, 0 above."""
    return triangle(x, diagonal, upper=False)


# --- index selections -------------------------------------------------------------------------


def _spread(x: Tensor, index: Tensor, d: int, like: Sequence[int]) -> Tensor:
    """A 1-D `index` along dim `d`, broadcast to the shape `like`."""
    _tensors("the index", index)
    if index.ndim != 1:
        raise error(f"expects a 1-D index, got shape {list(index.shape)}")
    shape = [1] * len(like)
    shape[d] = index.shape[0]
    return index.float().reshape(shape).broadcast_to(list(like))


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of `x` at the 1-D `index` along `dim` (a broadcast `tg.gather`)."""
    d = B.normalize_dims(dim, x.ndim, "index_select")[0]
    _rank("index_select: the index", index, 1)
    out = [index.shape[0] if k == d else n for k, n in enumerate(x.shape)]
    return x.gather(d, _spread(x, index, d, out))


def take_along_dim(x: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """`gather` along `dim` with `indices` broadcast against `x` (the flattened x when
    None)."""
    _tensors("take_along_dim", indices)
    if dim is None:
        return x.reshape(-1).gather(0, indices.reshape(-1).float())
    d = B.normalize_dims(dim, x.ndim, "take_along_dim")[0]
    shape = [indices.shape[k] if k == d else max(n, indices.shape[k]) for k, n in enumerate(x.shape)]
    base = [n if k != d else x.shape[d] for k, n in enumerate(shape)]
    return x.broadcast_to(base).gather(d, indices.float().broadcast_to(shape))


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """`x` plus `src` added at `index` along `dim` (`tg.scatter_add`; `index` and `src` of
    one shape)."""
    _tensors("scatter_add", index, src)
    d = B.normalize_dims(dim, x.ndim, "scatter_add")[0]
    if index.shape != src.shape:
        raise error(f"scatter_add: index {list(index.shape)} and src {list(src.shape)} must have one shape")  # fmt: skip
    added = emit(tg.ScatterAddOp(index.float().value, src.value, d, list(x.shape))).result
    return x + x._new(added)


def index_add(x: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1) -> Tensor:
    """`x` plus `alpha * source`'s slices added at the 1-D `index` along `dim`."""
    _tensors("index_add", source)
    d = B.normalize_dims(dim, x.ndim, "index_add")[0]
    src = source * alpha if alpha != 1 else source
    return scatter_add(x, d, _spread(x, index, d, src.shape), src)


def repeat_interleave(x: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Each element (each slice along `dim`) `repeats` times in a row (the flattened x
    when `dim` is None)."""
    if not isinstance(repeats, int):
        raise error("repeat_interleave: repeats must be a Python int (a tensor of counts makes a shape that depends on data)")  # fmt: skip
    if dim is None:
        return repeat_interleave(x.reshape(-1), repeats, 0)
    d = B.normalize_dims(dim, x.ndim, "repeat_interleave")[0]
    shape = list(x.shape)
    wide = x.unsqueeze(d + 1).expand(*shape[: d + 1], repeats, *shape[d + 1 :])
    return wide.reshape([*shape[:d], shape[d] * repeats, *shape[d + 1 :]])


def scatter(
    x: Tensor, dim: int, index: Tensor, src: Tensor | float | None = None, *,
    value: float | None = None, reduce: str | None = None,
) -> Tensor:  # fmt: skip
    """`x` with `src` (or the number `value`) written at `index` along `dim`, as
    PyTorch's `scatter` (`zeros(n, c).scatter_(1, labels[:, None], 1)`): a
    `tg.scatter_add` of ones marks the positions written; where an index repeats, a
    tensor `src`'s values there are summed (PyTorch picks one of them)."""
    if reduce is not None:
        raise error("scatter: reduce= is not supported (use scatter_add for 'add')")
    src = value if src is None else src
    if src is None:
        raise error("scatter: give src (a tensor or a number) or value")
    _tensors("scatter", index)
    d = B.normalize_dims(dim, x.ndim, "scatter")[0]
    ones = index.float() * 0.0 + 1.0
    hit = x._new(emit(tg.ScatterAddOp(index.float().value, ones.value, d, list(x.shape))).result)
    if isinstance(src, int | float):
        return x._where(hit > 0.5, float(src), x)
    written = scatter_add(x.new_zeros(x.shape), d, index, src[tuple(slice(0, n) for n in index.shape)])
    return x._where(hit > 0.5, written, x)


def scatter_(x: Tensor, dim: int, index: Tensor, src: Tensor | float | None = None, **kw: object) -> Tensor:  # noqa: E501
    """`scatter`, in place."""
    return _in_place(x, scatter(x, dim, index, src, **kw), "scatter_")  # type: ignore[arg-type]


def scatter_add_(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """`scatter_add`, in place."""
    return _in_place(x, scatter_add(x, dim, index, src), "scatter_add_")


def index_add_(x: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1) -> Tensor:
    """`index_add`, in place."""
    return _in_place(x, index_add(x, dim, index, source, alpha=alpha), "index_add_")
