"""Weight gradients summed after a reverse loop (used by `backprop.reverse_loop`).

A loop body that multiplies by a weight (`%y = tg.dot %h, %wt`, %wt a view of an outside
%w) or adds a bias (`tg.add %y, %bb`, %bb a broadcast of an outside %b) would add a
rank-B update (or a sum over the batch) into w's (b's) gradient every iteration.
Instead, as cuDNN sums an RNN's weight gradients, the reverse loop stacks the cotangent
of %y (and the forward loop %h), and one contraction over all iterations' rows (one
sum) after the reverse loop gives the gradient, then pushed back through the views.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of
from gradfuse.passes.lib.checkpoints import nbytes


def invariant_chain(value: SSAValue, outside: set[SSAValue]) -> list[Operation] | None:
    """The view ops (in program order) computing `value` from `outside` values alone,
    [] when `value` is one of them, None when it changes with the iteration."""
    if value in outside:
        return []
    op = value.owner
    if not isinstance(op, tg.PermuteOp | tg.ReshapeOp | tg.BroadcastOp):
        return None
    chain: list[Operation] = []
    for v in op.operands:
        sub = invariant_chain(v, outside)
        if sub is None:
            return None
        chain += [o for o in sub if o not in chain]
    return [*chain, op]


def deferrable(
    clones: Sequence[Operation],
    outside: set[SSAValue],
    forward_of: dict[SSAValue, SSAValue],
    n: int,
    stack_limit: int,
) -> dict[Operation, int]:
    """The ops of the reverse body (`clones`) whose gradient for one operand (the index
    given) is summed after the loop: `x @ w` and `y + b` with w, b the same every
    iteration and x, y not (x a forward value to stack), while the stacks fit."""
    found: dict[Operation, int] = {}
    room = stack_limit
    for op in clones:
        if isinstance(op, tg.DotOp) and op.lhs in forward_of:
            if len(shape_of(op.lhs)) != 2 or len(shape_of(op.rhs)) != 2:
                continue
            k, stacked = 1, (op.lhs, op.result)
        elif isinstance(op, tg.AddOp) and op.lhs.type == op.rhs.type == op.result.type:
            k, stacked = (1 if invariant_chain(op.rhs, outside) is not None else 0), (op.result,)
        else:
            continue
        if invariant_chain(op.operands[k], outside) is None:
            continue
        if invariant_chain(op.operands[1 - k], outside) is not None:
            continue
        size = n * nbytes(stacked)
        if size <= room:
            found[op] = k
            room -= size
    return found


def deferred_operand(
    d: Operation, k: int, outside: Sequence[SSAValue]
) -> tuple[SSAValue, list[Operation]]:
    """Operand k of deferred `d` for use after the loop: an outside value, or the last
    of detached copies of the views that compute it from outside values."""
    mapping: dict[SSAValue, SSAValue] = {}
    value = d.operands[k]
    views = [op.clone(value_mapper=mapping) for op in invariant_chain(value, set(outside)) or []]
    return (views[-1].results[0] if views else value), views
