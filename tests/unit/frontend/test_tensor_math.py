"""The elementwise composites of tensor_math.py, `tg.atan2`, and `cumprod` and `prod`
(tensor_cumulative.py), against float64 NumPy (values and analytic gradients, on the
reference interpreter and c) and against PyTorch's float64 at its special points (ties,
zeros, the ends of a domain) where torch is importable."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import gradfuse
from gradfuse import Parameter, Receiver, execute

RNG = np.random.default_rng(3)
U = RNG.uniform(-0.95, 0.95, (4, 6)).astype(np.float32)  # inside (-1, 1)
V = RNG.uniform(0.3, 3.0, (4, 6)).astype(np.float32)  # positive
S = RNG.uniform(-7.0, 7.0, (4, 6)).astype(np.float32)  # both signs
S[0, :3] = [0.0, -3.5, 7.0]
WIDE = np.array([0.0, 1e-6, -2.5, 3e3, -5e3, 1e6, 3e30, -1e-3], np.float32)  # asinh's range

# name: (gradfuse function of Parameters, float64 value, float64 gradient of the sum in
# each Parameter, the inputs); the gradient formulas are the functions' derivatives
Case = tuple[Callable, Callable, Callable, list[np.ndarray]]
CASES: dict[str, Case] = {
    "atan": (lambda x: x.atan(), np.arctan, lambda x: [1 / (1 + x * x)], [S]),
    "asin": (lambda x: gradfuse.asin(x), np.arcsin, lambda x: [1 / np.sqrt(1 - x * x)], [U]),
    "acos": (lambda x: x.arccos(), np.arccos, lambda x: [-1 / np.sqrt(1 - x * x)], [U]),
    "atan2": (
        lambda y, x: gradfuse.atan2(y, x), np.arctan2,
        lambda y, x: [x / (x * x + y * y), -y / (x * x + y * y)], [S, S[::-1].copy()],
    ),
    "tan": (lambda x: x.tan(), np.tan, lambda x: [1 / np.cos(x) ** 2], [U]),
    "sinh": (lambda x: x.sinh(), np.sinh, lambda x: [np.cosh(x)], [S]),
    "cosh": (lambda x: gradfuse.cosh(x), np.cosh, lambda x: [np.sinh(x)], [S]),
    "asinh": (lambda x: x.asinh(), np.arcsinh, lambda x: [1 / np.sqrt(1 + x * x)], [WIDE]),
    "acosh": (lambda x: x.acosh(), np.arccosh, lambda x: [1 / np.sqrt(x * x - 1)], [V + 1]),
    "atanh": (lambda x: x.atanh(), np.arctanh, lambda x: [1 / (1 - x * x)], [U]),
    "logaddexp": (
        lambda a, b: gradfuse.logaddexp(a, b), np.logaddexp,
        lambda a, b: [1 / (1 + np.exp(b - a)), 1 / (1 + np.exp(a - b))], [S, S.T.reshape(4, 6).copy()],
    ),
    "hypot": (
        lambda a, b: a.hypot(b), np.hypot,
        lambda a, b: [a / np.hypot(a, b), b / np.hypot(a, b)], [S, V],
    ),
    "xlogy": (
        lambda a, b: a.xlogy(b), lambda a, b: a * np.log(b),
        lambda a, b: [np.where(a == 0, 0.0, np.log(b)), a / b], [S, V],  # 0 at a == 0, as PyTorch
    ),
    "remainder": (
        lambda a, b: a % b, np.remainder, lambda a, b: [np.ones_like(a), -np.floor(a / b)],
        [S, V],
    ),
    "fmod": (
        lambda a, b: gradfuse.fmod(a, b), np.fmod, lambda a, b: [np.ones_like(a), -np.trunc(a / b)],
        [S, V],
    ),
    "lerp": (
        lambda a, b: a.lerp(b, 0.7), lambda a, b: a + 0.7 * (b - a),
        lambda a, b: [np.full_like(a, 0.3), np.full_like(a, 0.7)], [S, V],
    ),
    "addcdiv": (
        lambda a, b: gradfuse.addcdiv(a, a, b, value=0.5), lambda a, b: a + 0.5 * a / b,
        lambda a, b: [1 + 0.5 / b, -0.5 * a / b**2], [S, V],
    ),
    "frac": (lambda x: x.frac(), lambda x: x - np.trunc(x), lambda x: [np.ones_like(x)], [S]),
    "logsumexp": (
        lambda x: x.logsumexp(1),
        lambda x: np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1),
        lambda x: [np.exp(x) / np.exp(x).sum(1, keepdims=True)], [S],
    ),
    "logcumsumexp": (
        lambda x: x.logcumsumexp(1), lambda x: np.logaddexp.accumulate(x, 1),
        lambda x: [np.array([[sum(np.exp(r[j] - np.logaddexp.accumulate(r)[i]) for i in range(j, len(r))) for j in range(len(r))] for r in x])],  # noqa: E501
        [S],
    ),
    "sum_mean_dtype": (
        lambda x: x.sum(1, dtype=gradfuse.float32) + gradfuse.mean(x, 1, keepdim=False, dtype=gradfuse.float32),  # noqa: E501
        lambda x: x.sum(1) + x.mean(1), lambda x: [np.ones_like(x) * (1 + 1 / x.shape[1])], [S],
    ),
    "cumprod": (
        lambda x: x.cumprod(1), lambda x: np.cumprod(x, 1),
        lambda x: [np.array([[sum(np.prod(np.delete(r[: j + 1], i)) for j in range(i, len(r))) for i in range(len(r))] for r in x])],  # noqa: E501
        [V[:, :5] - 1],
    ),
    "prod": (
        lambda x: gradfuse.prod(x, 1), lambda x: np.prod(x, 1),
        lambda x: [np.array([[np.prod(np.delete(r, i)) for i in range(len(r))] for r in x])],
        [np.where(S[:, :5] > 5, 0.0, S[:, :5] / 4).astype(np.float32)],  # zeros among them
    ),
}  # fmt: skip
# Float32 against float64, measured 2026-12-08 (reference, and c with -march=native on a
# Sapphire Rapids and with -march=x86-64 -mno-fma): values within 4.0e-7 of the largest
# of their row (cosh; asinh at 1e6 and 3e30 included), gradients within 1.03e-6 (atanh's
# 1 / (1 - x^2) at 0.95, through log1p and two quotients), the others within 3.7e-7.
# Each is a few float32 roundings of libm functions (1-2 ulps) and of their inputs, with
# no long sums: 5e-6 is 4.8 times the worst measured.
RTOL = 5e-6


def run(name: str, backend: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The case's value and the gradients of its sum in each input, from gradfuse."""
    f, _, _, arrays = CASES[name]
    gradfuse.reset()
    params = [Parameter(a.copy(), name=f"p{k}") for k, a in enumerate(arrays)]
    y = f(*params)
    y.sum().backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [y, *(p.grad for p in params)])
    execute(backend=backend)
    return got[0], got[1:]


def close(got: np.ndarray, want: np.ndarray) -> None:
    """Within RTOL of the largest magnitude of each row (each element's own scale for a
    vector, whose entries span 36 orders of magnitude)."""
    want = np.asarray(want, np.float64)
    scale = np.abs(want) if want.ndim < 2 else np.abs(want).max(axis=-1, keepdims=True)
    assert np.all(np.abs(got - want) <= RTOL * scale + 1e-30), np.abs(got - want).max()


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_composite_values_and_gradients_are_float64_numpys(name: str, backend: str) -> None:
    _, value, grad, arrays = CASES[name]
    got, grads = run(name, backend)
    x64 = [a.astype(np.float64) for a in arrays]
    close(got, value(*x64))
    for g, w in zip(grads, grad(*x64), strict=True):
        close(g, w)


def test_the_ends_of_each_domain() -> None:
    """+-pi/2 and pi at the ends of [-1, 1]; +-inf and NaN for atanh; NaN below acosh's 1;
    Python's signs for % and //; sign and nan_to_num of NaN and infinities."""
    ends = np.array([-1.0, 1.0, 0.0, -0.0, 1.5], np.float32)
    gradfuse.reset()
    x = gradfuse.tensor(ends)
    a, b = gradfuse.tensor(np.array([-7.0, 7.0, -7.0, 7.0], np.float32)), gradfuse.tensor(np.array([2.0, -2.0, -2.0, 2.0], np.float32))  # fmt: skip
    odd = gradfuse.tensor(np.array([np.nan, np.inf, -np.inf, -2.0, 0.0], np.float32))
    outs = [x.asin(), x.acos(), x.atanh(), x.acosh(), a % b, a // b, gradfuse.fmod(a, b), odd.sign(), odd.nan_to_num(), gradfuse.atan2(x * 0, x * 0 - 1)]  # fmt: skip
    got = [o.numpy() for o in outs]
    with np.errstate(all="ignore"):
        e = ends.astype(np.float64)
        want = [np.arcsin(e), np.arccos(e), np.arctanh(e), np.arccosh(e)]
    for g, w in zip(got, want, strict=False):
        np.testing.assert_allclose(g, w, rtol=1e-6, equal_nan=True)
    np.testing.assert_array_equal(got[4], [1.0, -1.0, -1.0, 1.0])  # b's sign, as Python's
    np.testing.assert_array_equal(got[5], [-4.0, -4.0, 3.0, 3.0])
    np.testing.assert_array_equal(got[6], [-1.0, 1.0, -1.0, 1.0])  # a's sign, as C's
    np.testing.assert_array_equal(got[7], [np.nan, 1.0, -1.0, -1.0, 0.0])
    top = float(np.finfo(np.float32).max)
    np.testing.assert_array_equal(got[8], [0.0, top, -top, -2.0, 0.0])
    np.testing.assert_allclose(got[9], np.arctan2(ends * 0, ends * 0 - 1), rtol=1e-7)  # +-0: +-pi


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_special_points_are_pytorchs(backend: str) -> None:
    """Where the formula alone does not say: logaddexp's tie (half each), logsumexp of a
    row of -inf and of one holding inf, xlogy(0, 0) = 0 with finite gradients, prod and
    cumprod through zeros, asinh's gradient 1 at 0, lerp at weight 1 exactly the end."""
    torch = pytest.importorskip("torch")
    a = np.array([[1.5, -2.0, 0.0], [-np.inf, -np.inf, -np.inf], [3.0, np.inf, 1.0]], np.float32)
    b = np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 4.0], [1.0, 2.0, 0.0]], np.float32)

    def program(lib, x, y):  # noqa: ANN001, ANN202 (either library's tensors)
        finite = x[0:1]  # the row without infinities, for the gradients
        return [
            lib.logaddexp(finite, y[0:1]), x.logsumexp(1), lib.xlogy(y * 0.0, y),
            y.prod(1), y.cumprod(1), lib.asinh(finite * 0.0), lib.lerp(finite, y[0:1], 1.0),
        ]

    gradfuse.reset()
    px, py = Parameter(a.copy(), name="x"), Parameter(b.copy(), name="y")
    outs = program(gradfuse, px, py)
    sum((o[:1] if k == 1 else o).sum() for k, o in enumerate(outs)).backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [*outs, px.grad, py.grad])
    execute(backend=backend)
    tx = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    ty = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    want = program(torch, tx, ty)
    sum((o[:1] if k == 1 else o).sum() for k, o in enumerate(want)).backward()
    for g, w in zip(got, [*want, tx.grad, ty.grad], strict=True):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=2e-6, atol=1e-7)
