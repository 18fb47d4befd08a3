"""Where a gradient of a traced value flows: what `Tensor.backward()` differentiates for.

    y = model(x).sum()
    found, graph = backward_paths(y.value)
    found   # [(Parameter "0.weight", %w_current), ...]
    graph   # the values between those params and y: the graph that backward() frees

A param is found through its current value in the innermost enclosing block that
has one (a loop body's carried value, else the function's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.ir import Block, OpResult, SSAValue

from gradfuse.dialects import tg
from gradfuse.frontend.recorder import carries_gradient, insertion_block, program
from gradfuse.passes.lib.backprop import free_values

if TYPE_CHECKING:
    from gradfuse.frontend.parameter import Parameter


def _enclosing_blocks(block: Block) -> list[Block]:
    out: list[Block] = []
    where: Block | None = block
    while where is not None:
        out.append(where)
        parent = where.parent_op()
        where = parent.parent_block() if parent is not None else None
    return out


def _ancestors(value: SSAValue) -> dict[SSAValue, list[SSAValue]]:
    """The values a gradient of `value` flows back through, each with those it is computed
    from. As in PyTorch, none flows through `detach()` or a mask (a comparison, an
    integer): a param reached only that way gets no `.grad`, and optimizers skip it."""
    operands: dict[SSAValue, list[SSAValue]] = {}
    todo = [value]
    while todo:
        v = todo.pop()
        if v in operands or not carries_gradient(v):
            continue
        owner = v.owner
        if not isinstance(v, OpResult) or isinstance(owner, tg.StopGradientOp):
            operands[v] = []
        elif isinstance(owner, tg.ForOp):  # a loop's result: its inits and what its body reads
            operands[v] = [*owner.inits, *free_values(owner)]
        else:
            operands[v] = list(owner.operands)  # type: ignore[union-attr]
        todo.extend(operands[v])
    return operands


def backward_paths(value: SSAValue) -> tuple[list[tuple[Parameter, SSAValue]], set[SSAValue]]:
    """The params (with their current values) that a gradient of `value` reaches, and
    the values it flows through from them to `value` (the params' values left out):
    what PyTorch calls the graph that a `backward()` frees."""
    operands = _ancestors(value)
    prog = program()
    blocks = _enclosing_blocks(insertion_block())
    found: list[tuple[Parameter, SSAValue]] = []
    for key, param in prog.params.items():
        for block in blocks:
            current = prog.current.get((id(block), key))
            if current is not None:
                if current in operands:
                    found.append((param, current))
                break
    users: dict[SSAValue, list[SSAValue]] = {}
    for v, ins in operands.items():
        for o in ins:
            users.setdefault(o, []).append(v)
    leaves = {v for _, v in found}
    graph: set[SSAValue] = set()
    todo = list(leaves)
    while todo:
        for user in users.get(todo.pop(), ()):
            if user not in graph:
                graph.add(user)
                todo.append(user)
    return found, graph - leaves
