"""Losses with PyTorch's names and `reduction` ('mean', 'sum', 'none').

loss = CrossEntropyLoss()(logits, labels)    # labels: class ids as floats, from a feeder
"""

from __future__ import annotations

from gradfuse.frontend import functional_loss as F
from gradfuse.frontend.nn.module import Module
from gradfuse.frontend.nn.options import legacy_reduction, only
from gradfuse.frontend.recorder import error
from gradfuse.frontend.tensor import Tensor


class _Loss(Module):
    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ):
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in ("mean", "sum", "none"):
            raise error(
                f"{type(self).__name__}: reduction must be 'mean', 'sum' or 'none',"
                f" got {reduction!r}"
            )
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class MSELoss(_Loss):
    """Mean (or sum) of squared differences. `MSELoss()(y, target)`"""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """Mean (or sum) of absolute differences. `L1Loss()(y, target)`"""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    """Squared below `beta`, absolute above (`F.smooth_l1_loss`)."""

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean", beta: float = 1.0,
    ):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Squared below `delta`, linear above (`F.huber_loss`)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    """The Kullback-Leibler divergence of log-probabilities from a target (`F.kl_div`);
    `reduction="batchmean"` as PyTorch's."""

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean", log_target: bool = False,
    ):  # fmt: skip
        batchmean = reduction == "batchmean"
        super().__init__(size_average, reduce, "sum" if batchmean else reduction)
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities (logs clamped at -100). `BCELoss()(p, t)`"""

    def __init__(
        self,
        weight: object = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ):
        only("BCELoss", "weight", weight, None)
        super().__init__(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits, stable for any logit, with PyTorch's `weight` and
    `pos_weight` (buffers, in `state_dict()` as in PyTorch when given).

    `BCEWithLogitsLoss(pos_weight=np.full(5, 3.0, np.float32))(logits, labels)`
    """

    def __init__(
        self,
        weight: object = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        pos_weight: object = None,
    ):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight
        )


class _ClassLoss(_Loss):
    """A loss of class ids (`NLLLoss`, `CrossEntropyLoss`): PyTorch's `weight` must keep
    its default (an error says so); targets equal to `ignore_index` count nothing."""

    def __init__(
        self,
        weight: object = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
    ):
        only(type(self).__name__, "weight", weight, None)
        super().__init__(size_average, reduce, reduction)
        self.ignore_index = ignore_index


class NLLLoss(_ClassLoss):
    """The negative log-likelihood of log-probabilities [N, C, ...] at class ids [N, ...]
    (floats holding integers) (`F.nll_loss`). `NLLLoss()(F.log_softmax(x, dim=1), labels)`"""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, ignore_index=self.ignore_index, reduction=self.reduction)


class CrossEntropyLoss(_ClassLoss):
    """Cross-entropy of logits [N, C, ...] and class ids [N, ...] (floats holding integers):
    the `NLLLoss` of their log-softmax along dim 1, with PyTorch's `label_smoothing`.

    `CrossEntropyLoss()(logits, Feeder(labels, shape=[N]))`
    """

    def __init__(
        self,
        weight: object = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(weight, size_average, ignore_index, reduce, reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(
            input, target, self.reduction, self.label_smoothing, self.ignore_index
        )
