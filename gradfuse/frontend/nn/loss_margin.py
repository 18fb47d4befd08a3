"""Margin, embedding and likelihood losses with PyTorch's names and arguments
(`functional_margin.py`); `reduction` 'mean', 'sum' or 'none' as the other losses:

    TripletMarginLoss(margin=1.0)(anchor, positive, negative)
    GaussianNLLLoss()(mu, target, var)
"""

from __future__ import annotations

from gradfuse.frontend import functional_margin as F
from gradfuse.frontend.nn.loss import _Loss
from gradfuse.frontend.tensor import Tensor


class _MarginLoss(_Loss):
    """A loss with a `margin`."""

    def __init__(
        self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean",
    ):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.margin = margin


class MarginRankingLoss(_MarginLoss):
    """`max(-y (x1 - x2) + margin, 0)` (`F.margin_ranking_loss`)."""

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_MarginLoss):
    """`x` where y is 1, `max(margin - x, 0)` where y is -1 (`F.hinge_embedding_loss`)."""

    def __init__(
        self, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean",
    ):  # fmt: skip
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_MarginLoss):
    """`1 - cos` where y is 1, `max(cos - margin, 0)` where y is -1."""

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)  # fmt: skip


class SoftMarginLoss(_Loss):
    """`log(1 + exp(-y x))` (`F.soft_margin_loss`)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class TripletMarginLoss(_MarginLoss):
    """`max(margin + d(a, p) - d(a, n), 0)` with the `p`-norm distance."""

    def __init__(
        self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
        size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
    ):  # fmt: skip
        super().__init__(margin, size_average, reduce, reduction)
        self.p, self.eps, self.swap = p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
            reduction=self.reduction,
        )  # fmt: skip


class PoissonNLLLoss(_Loss):
    """`exp(x) - t x` (`log_input`), else `x - t log(x + eps)` (`F.poisson_nll_loss`)."""

    def __init__(
        self, log_input: bool = True, full: bool = False, size_average: bool | None = None,
        eps: float = 1e-8, reduce: bool | None = None, reduction: str = "mean",
    ):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input: Tensor, target: Tensor) -> Tensor:
        return F.poisson_nll_loss(
            log_input, target, self.log_input, self.full, eps=self.eps, reduction=self.reduction
        )


class GaussianNLLLoss(_Loss):
    """`(log v + (x - t)^2 / v) / 2`, v the variance clamped at `eps`."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input: Tensor, target: Tensor, var: Tensor | float) -> Tensor:
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    """Binary cross-entropy of each class's logit, averaged over classes."""

    def __init__(
        self, weight: Tensor | None = None, size_average: bool | None = None,
        reduce: bool | None = None, reduction: str = "mean",
    ):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.weight = weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)


class MultiMarginLoss(_Loss):
    """The multi-class hinge: `sum over i != y of max(0, margin - x[y] + x[i])^p / C`."""

    def __init__(
        self, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
        size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
    ):  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.p, self.margin, self.weight = p, margin, weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.multi_margin_loss(input, target, self.p, self.margin, self.weight, reduction=self.reduction)  # fmt: skip
