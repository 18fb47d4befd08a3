"""PyTorch's RMSprop, Adagrad and Adadelta, with its update formulas and state names,
recorded as tg ops ending in `tg.assign` (see `optim.py`):

    optimizer = optim.Adadelta(model.parameters(), lr=1.0)    # PyTorch's MNIST example
    optimizer = optim.RMSprop(model.parameters(), lr=0.01, momentum=0.9, centered=True)
"""

from __future__ import annotations

from collections.abc import Iterable

from gradfuse.frontend.optim import Optimizer, _check, _harmless
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


class RMSprop(Optimizer):
    """`v = alpha v + (1 - alpha) g^2` (centered: minus the squared running mean of g),
    `p -= lr g / (sqrt(v) + eps)`, with momentum through a buffer, as PyTorch's.
    `RMSprop(model.parameters(), lr=0.01)`"""

    GROUP_OPTIONS = ("lr", "weight_decay", "momentum")

    def __init__(
        self, params: Iterable[Parameter], lr: float = 1e-2, alpha: float = 0.99,
        eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
        centered: bool = False, capturable: bool = False, foreach: bool | None = None,
        maximize: bool = False, differentiable: bool = False,
    ):  # fmt: skip
        super().__init__(params)
        _check("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)  # fmt: skip
        _harmless("RMSprop", differentiable)
        self.centered, self.maximize = centered, maximize
        self._defaults(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)

    def update(self, p: Parameter, grad: Tensor) -> None:
        g = -grad if self.maximize else grad
        if self.weight_decay:
            g = g + p * self.weight_decay
        square_avg = self._state(p, "square_avg")
        v = square_avg * self.alpha + g * g * (1.0 - self.alpha)
        square_avg.assign(v)
        if self.centered:
            grad_avg = self._state(p, "grad_avg")
            mean = grad_avg * self.alpha + g * (1.0 - self.alpha)
            grad_avg.assign(mean)
            v = v - mean * mean
        step = g / (v.sqrt() + self.eps)
        if self.momentum:
            buf = self._state(p, "momentum_buffer")
            step = buf * self.momentum + step
            buf.assign(step)
        p.assign(p - step * self.lr)


class Adagrad(Optimizer):
    """`s += g^2`, `p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)`, as PyTorch's
    (`t` the step: gradfuse records one update, so lr_decay must be 0)."""

    def __init__(
        self, params: Iterable[Parameter], lr: float = 1e-2, lr_decay: float = 0.0,
        weight_decay: float = 0.0, initial_accumulator_value: float = 0.0, eps: float = 1e-10,
        foreach: bool | None = None, *, maximize: bool = False, differentiable: bool = False,
        fused: bool | None = None,
    ):  # fmt: skip
        super().__init__(params)
        _check("Adagrad", lr=lr, weight_decay=weight_decay, eps=eps)
        _harmless("Adagrad", differentiable)
        if lr_decay or initial_accumulator_value:
            raise error("Adagrad: lr_decay and initial_accumulator_value must be 0 in gradfuse")
        self.maximize = maximize
        self._defaults(lr=lr, weight_decay=weight_decay, eps=eps)

    def update(self, p: Parameter, grad: Tensor) -> None:
        g = -grad if self.maximize else grad
        if self.weight_decay:
            g = g + p * self.weight_decay
        state_sum = self._state(p, "sum")
        s = state_sum + g * g
        state_sum.assign(s)
        p.assign(p - g / (s.sqrt() + self.eps) * self.lr)


class Adadelta(Optimizer):
    """`v = rho v + (1 - rho) g^2`, `d = sqrt(u + eps) / sqrt(v + eps) * g`,
    `u = rho u + (1 - rho) d^2`, `p -= lr d`, as PyTorch's. `Adadelta(params, lr=1.0)`"""

    def __init__(
        self, params: Iterable[Parameter], lr: float = 1.0, rho: float = 0.9,
        eps: float = 1e-6, weight_decay: float = 0.0, foreach: bool | None = None, *,
        capturable: bool = False, maximize: bool = False, differentiable: bool = False,
    ):  # fmt: skip
        super().__init__(params)
        _check("Adadelta", lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        _harmless("Adadelta", differentiable)
        self.maximize = maximize
        self._defaults(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)

    def update(self, p: Parameter, grad: Tensor) -> None:
        g = -grad if self.maximize else grad
        if self.weight_decay:
            g = g + p * self.weight_decay
        square_avg, acc_delta = self._state(p, "square_avg"), self._state(p, "acc_delta")
        v = square_avg * self.rho + g * g * (1.0 - self.rho)
        square_avg.assign(v)
        delta = (acc_delta + self.eps).sqrt() / (v + self.eps).sqrt() * g
        acc_delta.assign(acc_delta * self.rho + delta * delta * (1.0 - self.rho))
        p.assign(p - delta * self.lr)

