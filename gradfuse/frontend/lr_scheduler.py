"""PyTorch's learning-rate schedulers (`torch.optim.lr_scheduler`), for training loops
that change the rate between epochs:

    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)   # PyTorch's MNIST example
    for epoch in range(1, epochs + 1):
        ir_for(range(batches), train_step)    # each epoch's loop traced with the rate now
        scheduler.step()

Each `scheduler.step()` sets every group's `lr` (`optimizer.param_groups[k]["lr"]`);
an `ir_for` body records its update with the rate it has when traced, so `step()` inside
one (a rate that would change every iteration) is an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from gradfuse.frontend.optim import Optimizer
from gradfuse.frontend.recorder import error, ir_for_body


class LRScheduler:
    """The base: `last_epoch` counts `step()`s; `factor(epoch)` scales each group's
    initial rate (subclasses)."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise error(f"{type(self).__name__}: expected an optimizer, got {type(optimizer).__name__}")  # fmt: skip
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._set(last_epoch + 1)

    def factor(self, epoch: int, base_lr: float, group: int) -> float:
        """The rate of epoch `epoch` for group `group`, which started at `base_lr`."""
        raise NotImplementedError

    def _set(self, epoch: int) -> None:
        self.last_epoch = epoch
        for k, (group, base) in enumerate(zip(self.optimizer.param_groups, self.base_lrs, strict=True)):  # fmt: skip
            group["lr"] = self.factor(epoch, base, k)

    def step(self, epoch: int | None = None) -> None:
        """The next epoch's rates (between `ir_for` loops, not inside one)."""
        if ir_for_body() is not None:
            raise error(
                f"{type(self).__name__}.step() inside an ir_for body: the body is traced once,"
                " so its rate cannot change from one iteration to the next; call step()"
                " between loops (one ir_for an epoch)"
            )
        self._set(self.last_epoch + 1 if epoch is None else epoch)

    def get_last_lr(self) -> list[float]:
        """Each group's rate now."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs)}


class StepLR(LRScheduler):
    """`lr * gamma ** (epoch // step_size)`."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):  # fmt: skip
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int, base_lr: float, group: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """`lr * gamma ** (the milestones passed)`."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):  # fmt: skip
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int, base_lr: float, group: int) -> float:
        return base_lr * self.gamma ** sum(1 for m in self.milestones if m <= epoch)


class ExponentialLR(LRScheduler):
    """`lr * gamma ** epoch`."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int, base_lr: float, group: int) -> float:
        return base_lr * self.gamma**epoch


class CosineAnnealingLR(LRScheduler):
    """`eta_min + (lr - eta_min) (1 + cos(pi epoch / T_max)) / 2`."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803  # fmt: skip
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int, base_lr: float, group: int) -> float:
        cos = math.cos(math.pi * epoch / self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * (1 + cos) / 2


class LambdaLR(LRScheduler):
    """`lr * lr_lambda(epoch)` (one function, or one a group)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]], last_epoch: int = -1):  # fmt: skip
        n = len(optimizer.param_groups)
        self.lambdas = list(lr_lambda) if isinstance(lr_lambda, Sequence) else [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int, base_lr: float, group: int) -> float:
        return base_lr * self.lambdas[group](epoch)
