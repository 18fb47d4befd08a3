"""`Buffer`: module state that is saved and loaded like a parameter but never trained.

`BatchNorm2d` keeps `running_mean`, `running_var` and `num_batches_tracked` as
buffers: they are params of the program (updated with `tg.assign`) and appear in
`state_dict()` under PyTorch's names, but a gradient never lands in their `.grad`,
so optimizers leave them alone:

    bn = BatchNorm2d(8)
    sorted(bn.state_dict())   # ['bias', 'num_batches_tracked', 'running_mean', ...]
"""

from __future__ import annotations

from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.tensor import Tensor


class Buffer(Parameter):
    """A `Parameter` whose `.grad` stays None: `backward()` never gives it a gradient.

    `self.running_mean = Buffer(np.zeros(8, np.float32))` inside a `Module.__init__`.
    Module.parameters() lists it (gradfuse keeps one kind of module state), but
    optimizers skip it because it never has a gradient.
    """

    __slots__ = ()

    @property  # type: ignore[override]
    def grad(self) -> Tensor | None:
        """Always None: buffers are not trained."""
        return None

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        """Ignores the gradient `backward()` computed."""

    def __deepcopy__(self, memo: dict[int, object]) -> Buffer:
        """A new buffer with a copy of the data and no key yet."""
        new = Buffer(self.data.copy(), self.name)
        memo[id(self)] = new
        return new
