"""Optimizers: each `step()` records the update as tg ops ending in `tg.assign`.

Their state (momentum buffers, Adam's moments and step count) is params of the
program, kept on the device across steps like the model's parameters:

    opt = Adam(model.parameters(), lr=1e-3)
    opt.zero_grad(); loss.backward(); opt.step()
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import direction_scope, error, module_scope, program
from gradfuse.frontend.tensor import Tensor, where


class Optimizer:
    """The base of optimizers: the parameter list and per-parameter state as params.

    Subclasses define `update(p, grad)`. `Optimizer(model.parameters())`
    """

    GROUP_OPTIONS: tuple[str, ...] = ("lr", "weight_decay")
    """The settings a parameter group may give its own value (PyTorch's `param_groups`)."""

    def __init__(self, params: Iterable[Parameter] | Iterable[dict[str, Any]]):
        entries = list(params)
        groups = entries if entries and isinstance(entries[0], dict) else [{"params": entries}]
        self.param_groups: list[dict[str, Any]] = [dict(g, params=list(g["params"])) for g in groups]  # type: ignore[arg-type]
        self.params: list[Parameter] = [p for g in self.param_groups for p in g["params"]]
        if not self.params:
            raise error(f"{type(self).__name__}: got an empty parameter list")
        self.state: dict[int, dict[str, Parameter]] = {}

    def _defaults(self, **settings: Any) -> None:
        """The constructor's settings: attributes, and each group's unless it gives its own
        (only `GROUP_OPTIONS` may differ by group)."""
        for name, value in settings.items():
            setattr(self, name, value)
        for k, group in enumerate(self.param_groups):
            for name in group:
                if name != "params" and name not in self.GROUP_OPTIONS and name in settings:
                    if group[name] != settings[name]:
                        raise error(
                            f"{type(self).__name__}: parameter group {k} sets {name}, which"
                            f" gradfuse keeps the same for all groups (these may differ:"
                            f" {', '.join(self.GROUP_OPTIONS)})"
                        )
            for name, value in settings.items():
                group.setdefault(name, value)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group (its params, its own settings) with the constructor's defaults."""
        group = dict(param_group, params=list(param_group["params"]))
        for name, value in self.param_groups[0].items():
            group.setdefault(name, value)
        self.param_groups.append(group)
        self.params.extend(group["params"])

    def parameters(self) -> list[Parameter]:
        """The parameters it updates (a method, as `Receiver(fn, opt.parameters)` expects)."""
        return list(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets the gradients; records nothing (each `backward()` writes fresh ones;
        `set_to_none=False`, PyTorch's zeros, is the same to gradfuse)."""
        for p in self.params:
            p.grad = None

    def _state(self, p: Parameter, name: str, shape: tuple[int, ...] | None = None) -> Parameter:
        """The state `name` of `p` (zeros at first), a param keyed `"<p's key>.<name>"`."""
        slots = self.state.setdefault(id(p), {})
        if name not in slots:
            buf = Parameter(np.zeros(p.shape if shape is None else shape, p.host.dtype))
            buf._hint = lambda: f"{program().key_of(p)}.{name}"
            slots[name] = buf
        return slots[name]

    def update(self, p: Parameter, grad: Tensor) -> None:
        """Records the update of one parameter (subclasses)."""
        raise NotImplementedError

    def begin_step(self) -> None:
        """Records what one step shares across parameters (such as a step count)."""

    def step(self, closure: object = None) -> None:
        """Records the update of every parameter that has a gradient, with its group's
        settings as they are now (`param_groups[k]["lr"]`, which a scheduler changes
        between loops: an `ir_for` body records the update once)."""
        if closure is not None:
            raise error(f"{type(self).__name__}.step(closure): a closure is not supported")
        with direction_scope("optimizer"):
            self.begin_step()
            for group in self.param_groups:
                for name in self.GROUP_OPTIONS:
                    setattr(self, name, group[name])
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    with module_scope(p.key.rpartition(".")[0]):
                        self.update(p, p.grad)
            for name in self.GROUP_OPTIONS:
                setattr(self, name, self.param_groups[0][name])

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state by parameter index: `"0.momentum_buffer"`, `"1.exp_avg"`, ..."""
        out = {}
        for i, p in enumerate(self.params):
            for name, buf in self.state.get(id(p), {}).items():
                out[f"{i}.{name}"] = buf.host.copy()
        return out


def _harmless(what: str, differentiable: bool) -> None:
    """`foreach`, `fused` and `capturable` pick PyTorch's implementation (gradfuse fuses
    every update anyway); `differentiable=True` would differentiate through the step."""
    if differentiable:
        raise error(f"{what}: differentiable=True is not supported by gradfuse")


def _check(what: str, **values: float) -> None:
    for name, v in values.items():
        if not v >= 0:
            raise error(f"{what}: {name} must be >= 0, got {v}")


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's semantics (momentum, weight decay).

    `g = grad + weight_decay * p` (`-grad` with `maximize`); with momentum
    `b = momentum * b + g` (b starts at 0, so the first step has b = g, as in PyTorch)
    and `g = b` (`g = g + momentum * b` with `nesterov`); then `p = p - lr * g`.
    `SGD(model.parameters(), lr=0.01)`
    """

    GROUP_OPTIONS = ("lr", "weight_decay", "momentum")

    def __init__(
        self,
        params: Iterable[Parameter],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        super().__init__(params)
        _check("SGD", lr=lr, momentum=momentum, weight_decay=weight_decay)
        _harmless("SGD", differentiable)
        if dampening != 0.0:
            raise error(f"SGD: dampening={dampening} is not supported by gradfuse (only 0)")
        if nesterov and momentum <= 0.0:
            raise error("SGD: nesterov momentum needs a momentum > 0 and zero dampening")
        self.dampening = dampening
        self.nesterov = nesterov
        self.maximize = maximize
        self._defaults(lr=lr, momentum=momentum, weight_decay=weight_decay)

    def update(self, p: Parameter, grad: Tensor) -> None:
        g = -grad if self.maximize else grad
        if self.weight_decay:
            g = g + p * self.weight_decay
        if self.momentum:
            buf = self._state(p, "momentum_buffer")
            b = buf * self.momentum + g
            buf.assign(b)
            g = g + b * self.momentum if self.nesterov else b
        p.assign(p + g * (-self.lr))


class Adam(Optimizer):
    """Adam with PyTorch's arguments, bias correction, L2 weight decay and AMSGrad.

    `m = b1 m + (1-b1) g`, `v = b2 v + (1-b2) g^2`, `p -= lr/(1-b1^t) * m /
    (sqrt(v)/sqrt(1-b2^t) + eps)`; the step `t` is a param (`"adam.step"`), so
    `b^t = exp2(t log2 b)` is computed on the device. `Adam(model.parameters(), lr=1e-3)`
    """

    def __init__(
        self,
        params: Iterable[Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ):
        super().__init__(params)
        what = type(self).__name__
        _harmless(what, differentiable)
        self.decoupled = decoupled_weight_decay  # True: AdamW's decay
        _check(what, lr=lr, eps=eps, weight_decay=weight_decay)
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise error(f"{what}: betas must be two numbers in [0, 1), got {betas}")
        self._defaults(lr=lr, betas=(float(betas[0]), float(betas[1])), eps=eps, weight_decay=weight_decay)  # fmt: skip
        self.amsgrad = amsgrad
        self.maximize = maximize
        self.step_count = Parameter(np.zeros((), np.float32), name=f"{what.lower()}.step")
        self._step: Tensor | None = None
        self._corrections: dict[object, tuple[Tensor, Tensor]] = {}  # by params' dtype

    def begin_step(self) -> None:
        t = self.step_count + 1.0
        self.step_count.assign(t)
        self._step = t  # float32: its corrections now; another params' dtype's at first use
        self._corrections = {np.dtype(np.float32): (self._correction(t, self.betas[0]), self._correction(t, self.betas[1]))}  # fmt: skip

    @staticmethod
    def _correction(t: Tensor, beta: float) -> Tensor:
        """`1 - beta ** t` (1 when beta is 0), to a few float32 roundings.

        With `y = t log2(beta)` and `u = exp2(y)`, `1 - u` alone cancels: at beta2 =
        0.999 and t = 1 it is 0.001 with 6e-5 relative error, which scales every
        step. Kahan's `expm1` form `(1 - u) * y / log2(u)` cancels u's rounding
        (W. Kahan, via Higham, Accuracy and Stability, 1.14.1); where u rounds to 1,
        `1 - beta ** t = -y ln 2` to float32 precision. (With beta in (0, 1), u <= 1:
        `u < 1` is `u != 1`, one comparison.)
        """
        if beta == 0.0:
            return t * 0.0 + 1.0
        y = t * math.log2(beta)
        u = y.exp2()
        return where(u < 1.0, (1.0 - u) * y / u.log2(), y * -math.log(2.0))

    def update(self, p: Parameter, grad: Tensor) -> None:
        assert self._step is not None, "begin_step() records the step count first"
        b1, b2 = self.betas
        g = -grad if self.maximize else grad
        decayed: Tensor = p
        if self.weight_decay and self.decoupled:
            decayed = p * (1.0 - self.lr * self.weight_decay)
        elif self.weight_decay:
            g = g + p * self.weight_decay
        m_buf, v_buf = self._state(p, "exp_avg"), self._state(p, "exp_avg_sq")
        m = m_buf * b1 + g * (1.0 - b1)
        v = v_buf * b2 + g * g * (1.0 - b2)
        m_buf.assign(m)
        v_buf.assign(v)
        if self.amsgrad:
            v_max_buf = self._state(p, "max_exp_avg_sq")
            v = v_max_buf.maximum(v)
            v_max_buf.assign(v)
        if p.dtype not in self._corrections:  # in the params' precision (the count is f32)
            t = self._step.to(p.dtype)
            self._corrections[p.dtype] = (self._correction(t, b1), self._correction(t, b2))
        bc1, bc2 = self._corrections[p.dtype]
        step_size = bc1.reciprocal() * (-self.lr)
        denom = v.sqrt() * bc2.sqrt().reciprocal() + self.eps
        p.assign(decayed + m / denom * step_size)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The moments by parameter index (`"0.exp_avg"`, `"0.exp_avg_sq"`) and `"step"`."""
        out = super().state_dict()
        out["step"] = self.step_count.host.copy()
        return out


class AdamW(Adam):
    """Adam with decoupled weight decay: `p *= 1 - lr * weight_decay` before the update.

    `AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)`
    """

    def __init__(
        self,
        params: Iterable[Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ):
        super().__init__(
            params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
            differentiable=differentiable, decoupled_weight_decay=True,
        )  # fmt: skip
