"""The tg dialect in Python: every op is registered, documented and checks its shapes
in words; the op families share their base classes (see gradfuse/dialects/tg.py)."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import f16, f32
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from gradfuse.dialects import tg
from gradfuse.dialects.tg import TG, tensor

OPS = list(TG.operations)


def args(*types):
    return Block(arg_types=list(types)).args


@pytest.mark.parametrize("op", OPS, ids=[o.name for o in OPS])
def test_every_op_is_named_tg_and_has_a_docstring_with_an_ir_example(op) -> None:
    assert op.name.startswith("tg.")
    assert op.__doc__ and "%" in op.__doc__, f"{op.name} has no IR example in its docstring"


def test_the_composites_are_ops_of_the_dialect() -> None:
    assert set(tg.COMPOSITES) <= set(OPS)


def test_shape_errors_name_the_op_and_say_what_is_wrong() -> None:
    a, b = args(tensor([2, 255]), tensor([254, 255]))
    with pytest.raises(
        VerifyException, match=r"^tg.dot: inner dimensions differ: 2x255 @ 254x255\n"
    ):
        tg.DotOp(a, b).verify()
    with pytest.raises(VerifyException, match=r"^tg.add: operand types differ: .*tg.broadcast"):
        tg.AddOp(a, b).verify()


def test_a_reshape_keeps_the_element_count_and_says_so() -> None:
    (x,) = args(tensor([2, 3]))
    assert tg.ReshapeOp(x, [3, 2]).verify() is None
    with pytest.raises(VerifyException, match=r"tg.reshape: cannot reshape 2x3 \(6 elements\)"):
        tg.ReshapeOp(x, [4, 2]).verify()


def test_elementwise_ops_take_f16_as_well_as_f32() -> None:
    a, b = args(tensor([4], f16), tensor([4], f16))
    op = tg.MulOp(a, b)
    op.verify()
    assert op.result.type == tensor([4], f16)
    c, d = args(tensor([4], f32), tensor([4], f16))
    with pytest.raises(VerifyException, match="tg.mul"):
        tg.MulOp(c, d).verify()
