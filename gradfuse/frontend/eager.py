"""The value of a traced tensor that the host can compute now, as PyTorch's eager
tensors have one: one that depends on constants, random numbers and parameters (their
values now, before the recorded program runs), not on a feeder's input or a loop body.
The ops it depends on are copied into a program of their own, which the reference
interpreter runs:

    w = gradfuse.nn.Parameter(gradfuse.randn(784, 10) / math.sqrt(784))  # a value now
    fc.weight.view(-1).tolist()          # after execute(): the trained values
    loss.item()                          # a feeder's batch: an error that says Receiver
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue

from gradfuse.backend import compile_module
from gradfuse.dialects import tg
from gradfuse.frontend.recorder import error, program


def _needed(value: SSAValue, what: str, loop: Operation | None = None) -> list[Operation]:
    """The ops `value` is computed by, in program order; an error where one is a
    feeder's or in a loop body (the host has no value for them before the run). With
    `loop`, ops in its body are allowed where they compute the same in every iteration:
    no param read, random numbers or loop index among them."""
    main = program().block
    found: set[Operation] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        op = v.owner
        if not isinstance(op, Operation):
            raise _no_value(what, "is a loop's block argument")
        if op in found:
            continue
        inside = loop is not None and loop.is_ancestor(op)
        if op.parent_block() is not main and not inside:
            raise _no_value(what, "is computed in an ir_for body, once an iteration")
        if isinstance(op, tg.FeederOp):
            raise _no_value(what, f"depends on the feeder \"{op.key.data}\"'s input")
        if op.regions:
            raise _no_value(what, f"depends on a {op.name}")
        if loop is not None and isinstance(op, tg.ParamOp | tg.RandomOp):
            raise _no_value(what, "changes from one iteration to the next")
        found.add(op)
        todo.extend(op.operands)
    return [op for op in program().module.walk() if op in found]


def _no_value(what: str, why: str):  # noqa: ANN202
    return error(
        f"{what}: the tensor {why}, so it has no value while the program is recorded;"
        " receive it with gradfuse.Receiver(lambda v: ..., tensor), which runs each time"
        " it is computed"
    )


def host_value(value: SSAValue, what: str, loop: Operation | None = None) -> np.ndarray:
    """The value of `value` computed now on the host (see the module's docstring), or
    an error naming `what` ("item()", "Parameter(tensor)"); with `loop`, also a value
    its body computes alike in every iteration (a mask a module caches)."""
    ops = _needed(value, what, loop)
    mapping: dict[SSAValue, SSAValue] = {}
    body = Block()
    for op in ops:
        copy = op.clone(value_mapper=mapping)
        body.add_op(copy)
        mapping.update(zip(op.results, copy.results, strict=True))
    body.add_op(tg.ReceiverOp("value", [mapping[value]]))
    body.add_op(func.ReturnOp())
    module = ModuleOp([func.FuncOp("main", ((), ()), Region(body))])
    prog = program()
    params = {
        op.key.data: prog.params[op.key.data].host for op in ops if isinstance(op, tg.ParamOp)
    }
    got: list[np.ndarray] = []
    compile_module(module, "reference").run(receivers={"value": got.append}, params=params)
    return np.asarray(got[0])
