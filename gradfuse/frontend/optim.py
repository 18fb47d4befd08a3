"""Optimizers: each `step()` records the update as tg ops ending in `tg.assign`.

opt = SGD(model.parameters(), lr=0.01, momentum=0.9)
opt.zero_grad(); loss.backward(); opt.step()
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import direction_scope, error, module_scope, program
from gradfuse.frontend.tensor import Tensor


class SGD:
    """Stochastic gradient descent with PyTorch's semantics (momentum, weight decay).

    `g = grad + weight_decay * p`; with momentum `b = momentum * b + g` (b starts at
    0, so the first step has b = g, as in PyTorch) and `g = b`; then `p = p - lr * g`.
    `SGD(model.parameters(), lr=0.01)`
    """

    def __init__(
        self,
        params: Iterable[Parameter],
        lr: float = 1e-3,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        self.params: list[Parameter] = list(params)
        if not self.params:
            raise error("SGD: got an empty parameter list")
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise error(
                f"SGD: lr, momentum and weight_decay must be >= 0, got {lr}, {momentum}, {weight_decay}"
            )
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.buffers: dict[int, Parameter] = {}

    def parameters(self) -> list[Parameter]:
        """The parameters it updates (a method, as `Receiver(fn, opt.parameters)` expects)."""
        return list(self.params)

    def zero_grad(self) -> None:
        """Forgets the gradients; records nothing (each `backward()` writes fresh ones)."""
        for p in self.params:
            p.grad = None

    def _buffer(self, p: Parameter) -> Parameter:
        buf = self.buffers.get(id(p))
        if buf is None:
            buf = Parameter(np.zeros_like(p.data))
            buf._hint = lambda: f"{program().key_of(p)}.momentum_buffer"
            self.buffers[id(p)] = buf
        return buf

    def step(self) -> None:
        """Records the update of every parameter that has a gradient."""
        with direction_scope("optimizer"):
            for p in self.params:
                if p.grad is None:
                    continue
                with module_scope(p.key.rpartition(".")[0]):
                    g: Tensor = p.grad
                    if self.weight_decay:
                        g = g + p * self.weight_decay
                    if self.momentum:
                        buf = self._buffer(p)
                        b = buf * self.momentum + g
                        buf.assign(b)
                        g = b
                    p.assign(p + g * (-self.lr))

    def state_dict(self) -> dict[str, np.ndarray]:
        """The momentum buffers by parameter index (`"0.momentum_buffer"`)."""
        out = {}
        for i, p in enumerate(self.params):
            if id(p) in self.buffers:
                out[f"{i}.momentum_buffer"] = self.buffers[id(p)].data.copy()
        return out
