"""Which params a traced value depends on: what `Tensor.backward()` differentiates for.

    y = model(x).sum()
    params_reached_by(y.value)   # [(Parameter "0.weight", %w_current), ...]

A param is found through its current value in the innermost enclosing block that
has one (a loop body's carried value, else the function's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import AnyFloat, TensorType
from xdsl.ir import Block, OpResult, SSAValue

from gradfuse.dialects import tg
from gradfuse.frontend.recorder import insertion_block, program

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


def _carries_gradient(value: SSAValue) -> bool:
    """Whether a gradient can flow through `value`: float tensors only (not masks)."""
    ty = value.type
    return not isinstance(ty, TensorType) or isinstance(ty.element_type, AnyFloat)


def params_reached_by(value: SSAValue) -> list[tuple[Parameter, SSAValue]]:
    """The params (with their current values) that a gradient of `value` can reach.

    As in PyTorch, a param that `value` depends on only through `detach()` or a mask
    (a comparison, an integer) gets no gradient: its `.grad` stays None, and an
    optimizer skips it."""
    reached: set[SSAValue] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v in reached or not _carries_gradient(v):
            continue
        reached.add(v)
        if isinstance(v, OpResult) and not isinstance(v.owner, tg.StopGradientOp):
            todo.extend(v.owner.operands)
    prog = program()
    blocks = _enclosing_blocks(insertion_block())
    found: list[tuple[Parameter, SSAValue]] = []
    for key, param in prog.params.items():
        for block in blocks:
            current = prog.current.get((id(block), key))
            if current is not None:
                if current in reached:
                    found.append((param, current))
                break
    return found


def backward_graph(value: SSAValue, leaves: set[SSAValue]) -> set[SSAValue]:
    """The values that a gradient of `value` flows through back to the param values
    `leaves` (leaves and detached values left out): what PyTorch calls the graph that
    a `backward()` frees."""
    depends: dict[SSAValue, bool] = {}
    stack: list[tuple[SSAValue, bool]] = [(value, False)]
    while stack:
        v, expanded = stack.pop()
        if v in depends:
            continue
        if v in leaves:
            depends[v] = True
        elif not isinstance(v, OpResult) or isinstance(v.owner, tg.StopGradientOp):
            depends[v] = False
        elif expanded:
            depends[v] = any(depends.get(o, False) for o in v.owner.operands)
        else:
            stack.append((v, True))
            stack.extend((o, False) for o in v.owner.operands if o not in depends)
    return {v for v, dep in depends.items() if dep and v not in leaves}
