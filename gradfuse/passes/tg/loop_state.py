"""`tg-loop-state`: loop-carried tensors become named state, like params.

A carried value lives in one buffer across iterations, so it is the same thing
as a param: read at the top of the body, assigned by the yield, read after the
loop. `tg-fuse` then handles it with the param machinery (in-place updates,
read/write ordering):

    %r = tg.for %i = 0 to 10 step 1 iter(%a = %x) : tensor<4xf32> {
      %b = tg.add %a, %a : tensor<4xf32>
      tg.yield %b
    }
    // becomes
    tg.assign "loop0.carry0", %x
    tg.for %i = 0 to 10 step 1 {
      %a = tg.param "loop0.carry0" init=0.0 : tensor<4xf32>
      %b = tg.add %a, %a : tensor<4xf32>
      tg.assign "loop0.carry0", %b
      tg.yield
    }
    %r = tg.param "loop0.carry0" : tensor<4xf32>
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import increments
from gradfuse.dialects.tg_canonicalize import splat
from gradfuse.dialects.tg_program import drop_carried


def _at(op: Operation, like: Operation) -> Operation:
    op.location = like.location
    return op


def twins(loop: tg.ForOp) -> tuple[int, int] | None:
    """Two carried values (i < j) that start equal and get the same value added each
    iteration, reading nothing else (autodiff's gradient of an outside tensor read at
    the step, and the stack of the same cotangents for a weight's gradient):

        iter(%a = %z, %b = %z) { ...; %a1 = tg.add %a, %x; %b1 = tg.add %b, %x; ... }
    """
    block = loop.body.block
    args, inits, nexts = block.args[1:], list(loop.inits), list(block.last_op.operands)  # type: ignore[union-attr]
    steps = [
        x if a.has_one_use() and y.has_one_use() else None
        for a, y, x in zip(args, nexts, increments(loop))
    ]

    def same(a: SSAValue, b: SSAValue) -> bool:
        return a is b or (splat(a) is not None and splat(a) == splat(b) and a.type == b.type)

    for j in range(len(args)):
        for i in range(j):
            if steps[i] is not None and steps[i] is steps[j] and same(inits[i], inits[j]):
                return i, j
    return None


def simplify_carried(loop: tg.ForOp) -> tg.ForOp:
    """`loop` carrying one of each pair of `twins`, and no value it yields unchanged (the
    cotangent of a stack passes through the reverse loop so: it is its init throughout,
    and copying it each iteration would cost the whole stack)."""
    while True:
        block = loop.body.block
        nexts = list(block.last_op.operands)  # type: ignore[union-attr]
        same = next((k for k, a in enumerate(block.args[1:]) if nexts[k] is a), None)
        if same is not None:
            block.args[same + 1].replace_all_uses_with(loop.inits[same])
            loop.results[same].replace_all_uses_with(loop.inits[same])
            loop = drop_carried(loop, same)
        elif (pair := twins(loop)) is not None:
            loop.results[pair[1]].replace_all_uses_with(loop.results[pair[0]])
            loop = drop_carried(loop, pair[1])
        else:
            return loop


def carried_to_state(loop: tg.ForOp, n: int) -> None:
    """Rewrites one loop with carried values into a loop over state keys `loop{n}.carry{k}`."""
    loop = simplify_carried(loop)
    keys = [f"loop{n}.carry{k}" for k in range(len(loop.inits))]
    parent = loop.parent
    assert parent is not None
    for key, init in zip(keys, loop.inits):
        parent.insert_op_before(_at(tg.AssignOp(key, init), loop), loop)
    block = loop.body.block
    first = block.first_op
    for key, arg in zip(keys, list(block.args[1:])):
        assert isinstance(arg.type, TensorType)
        read = _at(tg.ParamOp(key, arg.type, 0.0), loop)
        read.result.name_hint = arg.name_hint
        block.insert_op_before(read, first) if first else block.add_op(read)
        arg.replace_all_uses_with(read.result)
        block.erase_arg(arg)
    old_yield = block.last_op
    assert isinstance(old_yield, tg.YieldOp)
    for key, value in zip(keys, old_yield.values):
        block.insert_op_before(_at(tg.AssignOp(key, value), old_yield), old_yield)
    block.insert_op_before(_at(tg.YieldOp(), old_yield), old_yield)
    block.erase_op(old_yield)
    new = tg.ForOp(*loop.bounds, [], loop.detach_region(loop.body))
    new.location = loop.location
    parent.insert_op_before(new, loop)
    after = new
    for key, result in zip(keys, loop.results):
        read = _at(tg.ParamOp(key, result.type), loop)  # type: ignore[arg-type]
        read.result.name_hint = result.name_hint
        parent.insert_op_after(read, after)
        after = read
        result.replace_all_uses_with(read.result)
    parent.erase_op(loop)


@dataclass(frozen=True)
class TgLoopStatePass(ModulePass):
    """Turns every loop's carried tensors into named state (see the module docstring)."""

    name = "tg-loop-state"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        counter = itertools.count()
        for loop in [o for o in op.walk() if isinstance(o, tg.ForOp) and o.inits]:
            carried_to_state(loop, next(counter))
