"""For the composite tests (test_tensor_linalg.py, test_nn_more.py): a program's value
and the gradients of a weighted sum of it, from gradfuse and from PyTorch, and their
comparison within a tolerance of the largest magnitude."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import gradfuse
from gradfuse import Parameter, Receiver, execute


def gradfuse_run(
    program: Callable[..., Any], arrays: list[np.ndarray], backend: str
) -> tuple[np.ndarray, list[np.ndarray]]:
    """`program(*params)`'s value, and each param's gradient of the value weighted by
    linspace(-1, 1) and summed (0 where none reaches it: a mask's input)."""
    gradfuse.reset()
    params = [Parameter(a.copy(), name=f"p{k}") for k, a in enumerate(arrays)]
    y = program(*params)
    weights = np.linspace(-1, 1, y.numel(), dtype=np.float32).reshape(y.shape)
    (y * gradfuse.tensor(weights)).sum().backward()
    got: list[np.ndarray] = []
    grads = [gradfuse.zeros(*p.shape) if p.grad is None else p.grad for p in params]
    Receiver(lambda *v: got.extend(v), [y, *grads])
    execute(backend=backend)
    return got[0], got[1:]


def torch_grads(torch: Any, program: Callable[..., Any], arrays: list[np.ndarray]) -> list[np.ndarray]:  # noqa: E501
    """The same gradients from PyTorch in float64."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    y = program(*ts)
    weights = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)
    (y * weights).sum().backward()
    return [np.zeros(t.shape) if t.grad is None else t.grad.numpy() for t in ts]


def assert_near(got: np.ndarray, want: Any, tol: float) -> None:
    """Within `tol` of the largest magnitude of `want` (at least 1), shapes equal."""
    want = np.asarray(want)
    assert np.shape(got) == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))
