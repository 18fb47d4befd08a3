"""`Tensor.backward()`: records `tg.grad` of a tensor wrt every parameter a gradient
reaches, and hands each parameter its gradient (summed with what `.grad` held, through
DistributedDataParallel's reducer where there is one):

    loss.backward()        # %g:2 = tg.grad %loss wrt %w, %b ; w.grad, b.grad
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradfuse.dialects import tg
from gradfuse.frontend.reach import backward_paths
from gradfuse.frontend.recorder import direction_scope, emit, error, is_visible, program

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor


def backward(
    self: Tensor,
    gradient: object = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: object = None,
) -> None:
    """Records `tg.grad` of `self` wrt every parameter it depends on; sets their `.grad`.

    A non-scalar tensor gets a gradient of ones (d sum(self)). As in PyTorch, a
    second `backward()` through (part of) a graph that an earlier one went through
    is an error unless that one had `retain_graph=True`; gradients of separate
    graphs (two forward passes) add up in `.grad`. `loss.backward()`
    """
    if gradient is not None or create_graph or inputs is not None:
        raise error(
            "backward(): gradient=, create_graph= and inputs= are not supported"
            " (gradfuse differentiates a tensor wrt every parameter it depends on)"
        )
    found, graph = backward_paths(self.value)
    if not found:
        raise error(
            "backward(): the tensor does not depend on any parameter, so there is nothing"
            " to differentiate"
        )
    prog = program()
    if not prog.freed.isdisjoint(graph):
        raise error(
            "backward(): trying to backward through the graph a second time (an earlier"
            " backward() went through it): pass retain_graph=True to that earlier"
            " backward() to keep the graph for another one"
        )
    if not retain_graph:
        prog.freed |= graph
    with direction_scope("backward"):
        grad = emit(tg.GradOp(self.value, [v for _, v in found]))
        summed = []
        for (param, _), g in zip(found, grad.grads, strict=True):
            new, old = self._new(g), param.grad
            if old is not None and is_visible(old.value):
                new = old + new
            summed.append((param, new))
        reducers = dict.fromkeys(p._reducer for p, _ in summed if p._reducer is not None)
        for reduce in reducers:  # DistributedDataParallel: averaged over ranks
            summed = reduce(summed)
        for param, new in summed:
            param.grad = new
