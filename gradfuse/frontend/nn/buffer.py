"""`Buffer`: module state that is saved and loaded like a parameter but never trained.

`BatchNorm2d` keeps `running_mean`, `running_var` and `num_batches_tracked` as
buffers: they are params of the program (updated with `tg.assign`) and appear in
`state_dict()` under PyTorch's names, but not in `parameters()` (as in PyTorch), and
a gradient never lands in their `.grad`:

    bn = BatchNorm2d(8)
    list(bn.state_dict())      # ['weight', 'bias', 'running_mean', 'running_var', ...]
    len(bn.parameters())       # 2; bn.buffers() lists the other 3
"""

from __future__ import annotations

from gradfuse.frontend.parameter import Parameter


class Buffer(Parameter):
    """A `Parameter` whose `.grad` stays None (`requires_grad` is False): `backward()`
    never gives it a gradient.

    `self.running_mean = Buffer(np.zeros(8, np.float32))` inside a `Module.__init__`
    (or `self.register_buffer("running_mean", np.zeros(8, np.float32))`), listed by
    `Module.buffers()`, not by `Module.parameters()`.
    """

    __slots__ = ()
    TRAINABLE = False  # never a gradient; updated in place without no_grad()

    def __deepcopy__(self, memo: dict[int, object]) -> Buffer:
        """A new buffer with a copy of the data and no key yet."""
        new = Buffer(self.host.copy(), self.name)
        memo[id(self)] = new
        return new
