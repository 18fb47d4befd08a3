"""The steps of tests/unit/random_programs.py in float64 NumPy and in PyTorch.

`NumpyOps` computes a program's loss (for finite differences, and to follow shapes
while a program is drawn); `TorchOps` runs it under torch.autograd with torch.optim.SGD:

    loss = forward(spec, NumpyOps(spec, values={0: p0}))[0]
    want = run_torch(spec)        # an Outcome, as gradfuse's runs give
"""

from __future__ import annotations

from typing import Any

import numpy as np
from random_programs import Ops, Outcome, Spec, StepDoesNotFit, forward

MAX_ELEMENTS = 96


class NumpyOps(Ops):
    """float64 NumPy; `kink` is how close any relu/abs/max/where came to switching."""

    def __init__(self, spec: Spec, values: dict[int, np.ndarray] | None = None):
        super().__init__(spec)
        self.values = values or {}
        self.kink = np.inf

    def _fit(self, v: Any) -> Any:
        v = np.asarray(v, np.float64)
        if v.size > MAX_ELEMENTS or 0 in v.shape or v.ndim > 4:
            raise StepDoesNotFit(v.shape)
        return v

    def _near(self, distance: Any) -> None:
        if np.size(distance):
            self.kink = min(self.kink, float(np.min(np.abs(distance))))

    def param(self, i: int, shape: tuple[int, ...]) -> Any:
        value = self.values.get(i)
        return self._fit(self.initial(i, shape) if value is None else value)

    def feed(self, i: int, shape: tuple[int, ...]) -> Any:
        return self._fit(self.fed(i, shape, 0))

    def unary(self, name: str, v: Any) -> Any:
        if name in ("relu", "abs"):
            self._near(v)
        fns = {
            "exp": lambda: np.exp(np.tanh(v)), "sin": lambda: np.sin(v),
            "tanh": lambda: np.tanh(v), "sigmoid": lambda: 1 / (1 + np.exp(-v)),
            "relu": lambda: np.maximum(v, 0), "abs": lambda: np.abs(v), "neg": lambda: -v,
            "sqrt": lambda: np.sqrt(v * v + 1), "log": lambda: np.log(v * v + 0.5),
            "square": lambda: v * v,
        }  # fmt: skip
        return self._fit(fns[name]())

    def binary(self, op: str, a: Any, b: Any) -> Any:
        return self._fit(super().binary(op, a, b))

    def reduce(self, kind: str, v: Any, dim: int | None, keepdim: bool) -> Any:
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max}[kind]
        if kind == "max":
            top = np.sort(v, axis=dim)  # the gap between the two largest decides ties
            if (v.shape[dim] if dim is not None else v.size) > 1:
                gap = top.take(-1, axis=dim or 0) - top.take(-2, axis=dim or 0)
                self._near(gap if dim is not None else np.ravel(top)[-1] - np.ravel(top)[-2])
        return self._fit(fn(v, axis=dim, keepdims=keepdim))

    def matmul(self, a: Any, b: Any) -> Any:
        return self._fit(a @ b)

    def softmax(self, v: Any, dim: int) -> Any:
        e = np.exp(v - v.max(axis=dim, keepdims=True))
        return self._fit(e / e.sum(axis=dim, keepdims=True))

    def where(self, v: Any, other: Any) -> Any:
        self._near(v)
        return self._fit(np.where(v > 0, v, other * 0.5))

    def detach(self, v: Any) -> Any:
        return v

    def reshape(self, v: Any, shape: tuple[int, ...]) -> Any:
        return self._fit(v.reshape(shape))

    def permute(self, v: Any, perm: tuple[int, ...]) -> Any:
        return self._fit(v.transpose(perm))

    def getitem(self, v: Any, key: tuple[Any, ...]) -> Any:
        return self._fit(v[key])


def numpy_grads(spec: Spec, h: float = 1e-6) -> tuple[dict[int, np.ndarray], float]:
    """Central differences of the first step's loss wrt every param, in float64, and
    how close the program came to a kink (differences across one are meaningless)."""
    base = NumpyOps(spec)
    _, prog = forward(spec, base)
    values = {i: np.array(p) for i, p in enumerate(prog.params)}
    grads: dict[int, np.ndarray] = {}
    for i, p in values.items():
        g = np.zeros_like(p)
        for j in np.ndindex(p.shape):
            sums = []
            for sign in (1, -1):
                moved = {**values, i: p.copy()}
                moved[i][j] += sign * h
                sums.append(float(forward(spec, NumpyOps(spec, moved))[0]))
            g[j] = (sums[0] - sums[1]) / (2 * h)
        grads[i] = g
    return grads, base.kink


def run_torch(spec: Spec, torch: Any) -> Outcome:
    """The program under torch.autograd and torch.optim.SGD, in float64."""

    class TorchOps(Ops):
        def __init__(self) -> None:
            super().__init__(spec)
            self.made: dict[int, Any] = {}
            self.t = 0

        def param(self, i: int, shape: tuple[int, ...]) -> Any:
            if i not in self.made:
                data = torch.tensor(self.initial(i, shape), dtype=torch.float64)
                self.made[i] = torch.nn.Parameter(data)
            return self.made[i]

        def feed(self, i: int, shape: tuple[int, ...]) -> Any:
            return torch.tensor(self.fed(i, shape, self.t), dtype=torch.float64)

        def reduce(self, kind: str, v: Any, dim: int | None, keepdim: bool) -> Any:
            kind = "amax" if kind == "max" else kind
            return super().reduce(kind, v, dim, keepdim)

        def where(self, v: Any, other: Any) -> Any:
            return torch.where(v > 0, v, other * 0.5)

    ops, out = TorchOps(), Outcome()
    opt = None
    for t in range(max(spec.iters, 1)):
        ops.t = t
        loss, prog = forward(spec, ops)
        if opt is None:
            opt = torch.optim.SGD(
                prog.params, lr=0.05, momentum=spec.momentum, weight_decay=spec.weight_decay
            )
        opt.zero_grad()
        loss.backward()
        out.losses.append(float(loss.detach()))
        grads = {i: p.grad.numpy().copy() for i, p in enumerate(prog.params) if p.grad is not None}
        out.grads.append(grads)
        opt.step()
    out.params = {i: p.detach().numpy().copy() for i, p in ops.made.items()}
    return out
