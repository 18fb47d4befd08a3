"""Products, diagonals and index selections (tensor_linalg.py, gradfuse.linalg): values
against float64 NumPy on reference and c, gradients against PyTorch's float64 where torch
is importable, and the clear errors of what they cannot take."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from weighted_sums import assert_near, gradfuse_run, torch_grads

import gradfuse
from gradfuse.diagnostics import GradfuseError

RNG = np.random.default_rng(11)
A = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
B = RNG.uniform(-1, 1, (4, 5)).astype(np.float32)
V = RNG.uniform(-1, 1, (4,)).astype(np.float32)
W = RNG.uniform(-1, 1, (3,)).astype(np.float32)
Q = RNG.uniform(-1, 1, (4, 4)).astype(np.float32)
T3 = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
P = RNG.uniform(-1, 1, (2, 3)).astype(np.float32)
IDX = np.array([3, 0, 0, 2], np.float32)

# name: (program on either library, float64 NumPy of the value, inputs); `lib` is the
# module (gradfuse or torch), `ix` an index tensor made by the library
Case = tuple[Callable, Callable, list[np.ndarray]]
CASES: dict[str, Case] = {
    "outer": (lambda lib, ix, v, w: lib.outer(v, w), np.outer, [V, W]),
    "dot": (lambda lib, ix, v: lib.dot(v, v * 2.0), lambda v: np.dot(v, 2 * v), [V]),
    "mv": (lambda lib, ix, a, v: a.mv(v), np.dot, [A, V]),
    "addmm": (
        lambda lib, ix, a, b: lib.addmm(b[0], a, b, beta=0.5, alpha=2.0),
        lambda a, b: 0.5 * b[0] + 2.0 * (a @ b), [A, B],
    ),
    "baddbmm": (
        lambda lib, ix, t: lib.baddbmm(t[:, :, :3], t, t.transpose(1, 2)),
        lambda t: t[:, :, :3] + t @ t.transpose(0, 2, 1), [T3],
    ),
    "tensordot": (
        lambda lib, ix, t, a: lib.tensordot(t, a, dims=([2, 1], [1, 0])),  # pairs in order
        lambda t, a: np.tensordot(t, a, axes=([2, 1], [1, 0])), [T3, A],
    ),
    "kron": (lambda lib, ix, p, q: lib.kron(p, q), np.kron, [P, Q]),
    "cross": (
        lambda lib, ix, a, b: lib.cross(a, b, dim=1),
        lambda a, b: np.cross(a, b, axis=1), [A[:, :3].copy(), B[:3, :3].copy()],
    ),
    "diagonal": (
        lambda lib, ix, t: t.diagonal(offset=1, dim1=2, dim2=1),
        lambda t: np.diagonal(t, offset=1, axis1=2, axis2=1), [T3],
    ),
    "diag_vector": (lambda lib, ix, v: lib.diag(v, -1), lambda v: np.diag(v, -1), [V]),
    "diag_matrix": (lambda lib, ix, a: lib.diag(a, 1), lambda a: np.diag(a, 1), [A]),
    "trace": (lambda lib, ix, q: q.trace(), np.trace, [Q]),
    "triu": (lambda lib, ix, a: a.triu(1), lambda a: np.triu(a, 1), [A]),
    "index_select": (
        lambda lib, ix, a: a.index_select(1, ix), lambda a: a[:, IDX.astype(int)], [A],
    ),
    "index_add": (
        lambda lib, ix, a, b: a.index_add(1, ix, b[:3], alpha=2.0),
        lambda a, b: a + 2.0 * np.stack([b[:3, IDX == k].sum(1) for k in range(4)], 1), [A, B[:, :4].copy()],  # noqa: E501
    ),
    "take_along_dim": (
        lambda lib, ix, a: lib.take_along_dim(a, ix[None, :], dim=1),
        lambda a: np.take_along_axis(a, np.broadcast_to(IDX.astype(int), (3, 4)), 1), [A],
    ),
    "repeat_interleave": (
        lambda lib, ix, a: a.repeat_interleave(2, dim=0), lambda a: np.repeat(a, 2, 0), [A],
    ),
    "cdist": (
        lambda lib, ix, a, b: lib.cdist(a, b),
        lambda a, b: np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)), [A, np.concatenate([A[:1], B.T[:3, :4]])],  # noqa: E501
    ),
    "scatter_value": (  # the one-hot idiom: zeros(n, c).scatter_(1, labels[:, None], 1)
        lambda lib, ix, a: a.scatter(1, lib.tensor([[3], [0], [2]]), 1.5),
        lambda a: np.where(np.arange(4) == np.array([[3], [0], [2]]), 1.5, a), [A],
    ),
    "scatter_src": (  # (no index repeats along the dim: PyTorch picks one of repeated ones)
        lambda lib, ix, a, b: a.scatter(1, lib.tensor([[1, 3]] * 3), b[:3, :2]),
        lambda a, b: np.where(np.arange(4) == 1, b[:3, :1], np.where(np.arange(4) == 3, b[:3, 1:2], a)),  # noqa: E501
        [A, B],
    ),
    "median": (
        lambda lib, ix, a: a.median(1).values + lib.median(a[:, :3]),
        lambda a: np.sort(a, 1)[:, 1] + np.sort(a[:, :3].ravel())[4], [A],
    ),
    "std_mean": (
        lambda lib, ix, a: lib.std_mean(a, 0)[0] * lib.var_mean(a, 0, unbiased=False)[1],
        lambda a: a.std(0, ddof=1) * a.mean(0), [A],
    ),
    "vector_norm": (
        lambda lib, ix, a: lib.linalg.vector_norm(a, dim=1), lambda a: np.linalg.norm(a, axis=1), [A],
    ),
}  # fmt: skip
# Float32 against float64, measured 2026-12-08 (reference, and c with -march=native on a
# Sapphire Rapids and with -march=x86-64 -mno-fma): within 9.8e-8 of the largest
# magnitude of the result (sums of at most 12 products of numbers below 1, and square
# roots); 2e-6 bounds 12 roundings of 2^-24 relative to a sum of |terms| of up to 1.6
# times the largest result. Moves (diagonals, selections, repeats) are exact.
TOL = 2e-6


def run(name: str, backend: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The case's value and the gradients of its weighted sum, from gradfuse."""
    f, _, arrays = CASES[name]
    return gradfuse_run(lambda *ps: f(gradfuse, gradfuse.tensor(IDX), *ps), arrays, backend)


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_are_float64_numpys(name: str, backend: str) -> None:
    _, value, arrays = CASES[name]
    assert_near(run(name, backend)[0], value(*(a.astype(np.float64) for a in arrays)), TOL)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_are_pytorchs(name: str) -> None:
    """The gradient of a weighted sum: the scatter or gather back of the selections, the
    products' transposed products; cdist's at a distance of 0 (its first rows are
    equal) is 0, as PyTorch's."""
    torch = pytest.importorskip("torch")
    f, _, arrays = CASES[name]
    index = torch.tensor(IDX, dtype=torch.long)
    wants = torch_grads(torch, lambda *ts: f(torch, index, *ts), arrays)
    for got, want in zip(run(name, "c")[1], wants, strict=True):
        assert_near(got, want, TOL)


def test_what_they_cannot_take_is_a_clear_error() -> None:
    gradfuse.reset()
    a = gradfuse.tensor(A)
    for call, words in [
        (lambda: gradfuse.outer(a, a), "outer: expects a tensor of rank 1"),
        (lambda: gradfuse.dot(a[0], a[0, :3]), "dot: vectors of lengths 4 and 3"),
        (lambda: a.cross(a, dim=1), "cross: dim 1 must have size 3"),
        (lambda: a.diagonal(offset=9), "diagonal: offset 9 leaves no element"),
        (lambda: a.repeat_interleave(gradfuse.tensor(IDX)), "repeats must be a Python int"),
        (lambda: gradfuse.tensordot(a, a, dims=([1], [1, 0])), "tensordot"),
        (lambda: gradfuse.outer(a[0], 3), "outer: expected a Tensor, got int"),
        (lambda: gradfuse.kron(a, 2), "kron: expected a Tensor, got int"),
        (lambda: a.index_select(1, [0, 1]), "the index: expected a Tensor, got list"),
        (lambda: a.index_add(0, gradfuse.tensor([0.0]), 1.0), "index_add: expected a Tensor, got float"),
        (lambda: a.lerp(a, "x"), "lerp: weight must be a number or a Tensor, got str"),
        (lambda: gradfuse.nn.functional.glu(a, 5), "glu: dim 5 is out of range"),
        (lambda: gradfuse.nn.functional.margin_ranking_loss(a[0], a[0], a), "the same rank"),
    ]:
        with pytest.raises(GradfuseError, match=words):
            call()
