"""`find_param`: the `tg.param` that `tg.param` and `tg.assign` verify against, from an
index kept per program and checked on use (it replaced a walk of the whole program per
verified op, which made tracing quadratic in the program's size)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region
from xdsl.utils.exceptions import VerifyException

import gradfuse
from gradfuse import Feeder, ir_for
from gradfuse.dialects import tg
from gradfuse.dialects.tg import tensor
from gradfuse.dialects.tg_program import find_param
from gradfuse.nn import Linear, Sequential, Sigmoid

T2 = tensor([2])


def program(*ops) -> tuple[ModuleOp, Block]:
    """A module with one function `main` holding `ops`."""
    body = Block(list(ops))
    body.add_op(func.ReturnOp())
    return ModuleOp([func.FuncOp("main", ((), ()), Region(body))]), body


def test_a_param_erased_or_moved_away_no_longer_stands_for_its_key() -> None:
    first, second = tg.ParamOp("w", T2, 0.0), tg.ParamOp("w", T2, 1.0)
    module, body = program(first, second, assign := tg.AssignOp("w", first.result))
    module.verify()
    assert find_param(assign, "w") is first
    assign.operands = (second.result,)
    first.detach()
    other, _ = program(first)  # in another program now: not this one's
    assert find_param(assign, "w") is second
    assert find_param(first, "w") is first
    second.detach()
    with pytest.raises(VerifyException, match=r'there is no tg.param "w" to assign to'):
        module.verify()
    body.insert_op_before(third := tg.ParamOp("w", T2, 2.0), body.first_op)
    assign.operands = (third.result,)
    module.verify()  # a param added without being verified is found by the walk
    assert find_param(assign, "w") is third


def test_a_param_of_a_second_type_is_an_error() -> None:
    w2, w3 = tg.ParamOp("w", T2, 0.0), tg.ParamOp("w", tensor([3]), 0.0)
    module, _ = program(w2, w3)
    with pytest.raises(VerifyException, match=r'param "w" is read with two types'):
        module.verify()
    with pytest.raises(VerifyException, match=r"two types: tensor<2xf32> and tensor<3xf32>"):
        w3.verify()


def walks_to_trace(layers: int) -> int:
    """How many times recording a training step of `layers` linear layers walks the
    whole program (a `walk` of the module that the recorder builds)."""
    calls = 0
    walk = ModuleOp.walk

    def counted(self, *args, **kwargs):
        nonlocal calls
        calls += 1
        return walk(self, *args, **kwargs)

    gradfuse.reset()
    model = Sequential(*(m for _ in range(layers) for m in (Linear(4, 4), Sigmoid())))
    opt = gradfuse.nn.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        x = Feeder(lambda: np.ones((2, 4), np.float32), shape=[2, 4])
        model(x).sum().backward()
        opt.step()

    ModuleOp.walk = counted  # type: ignore[method-assign]
    try:
        ir_for(range(3), step)
    finally:
        ModuleOp.walk = walk  # type: ignore[method-assign]
        gradfuse.reset()
    return calls


def test_recording_walks_the_program_as_often_whatever_its_number_of_params() -> None:
    assert walks_to_trace(8) == walks_to_trace(2)
