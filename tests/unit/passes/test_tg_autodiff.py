"""tg-autodiff: accumulation, broadcasting, loops, errors and provenance."""

from __future__ import annotations

import numpy as np
import pytest
from _gradcheck import apply, build, check_gradients, model_loc, ops_named, random_inputs, run
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, NameLoc
from xdsl.ir import Block, Region, SSAValue
from xdsl.rewriter import InsertPoint

from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of, tensor
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.passes.tg.autodiff import TgAutodiffPass
from gradfuse.provenance import provenance_of


def test_value_used_several_times_accumulates_with_add():
    def body(e: Emitter, x: SSAValue) -> SSAValue:
        return e.add(e.mul(x, x), e.sin(x))

    module = check_gradients(body, [(2, 3)], square=False)
    fn_ops = [op.name for op in module.walk()]
    assert fn_ops.count("tg.add") >= 3  # forward add + two accumulations for x


def test_broadcast_gradients_reduce_back_to_the_input_shape():
    def body(e: Emitter, x: SSAValue, b: SSAValue) -> SSAValue:
        row = e.broadcast(e.reshape(b, [1, 3]), [2, 3])
        return e.mul(e.add(x, row), row)

    module = check_gradients(body, [(2, 3), (3,)])
    (ret,) = ops_named(module, "func.return")
    assert [shape_of(v) for v in ret.operands[1:]] == [(2, 3), (3,)]
    assert ops_named(module, "tg.reduce_sum")


def test_dot_with_transposed_operands_through_permute():
    def body(e: Emitter, a: SSAValue, b: SSAValue) -> SSAValue:
        return e.dot(e.permute(a, [1, 0]), e.permute(b, [1, 0]))

    check_gradients(body, [(3, 2), (4, 3)])


def test_linear_layer_with_bias_and_sigmoid():
    def body(e: Emitter, x: SSAValue, w: SSAValue, b: SSAValue) -> SSAValue:
        y = e.add(e.dot(x, w), e.broadcast(e.reshape(b, [1, 3]), [2, 3]))
        return e.reduce_sum(e.emit(tg.SigmoidOp(y)), [1])

    check_gradients(body, [(2, 4), (4, 3), (3,)])


def test_unused_wrt_value_gets_a_zero_constant():
    module = apply(build(lambda e, x, y: e.sin(x), [(2,), (3,)], grad=True), TgAutodiffPass())
    result = run(module, args=random_inputs([(2,), (3,)]), dtype=np.float64).results
    np.testing.assert_array_equal(result[2], np.zeros(3))
    (ret,) = ops_named(module, "func.return")
    zero = ret.operands[2].owner
    assert isinstance(zero, tg.ConstantOp) and zero.value.value.data == 0.0


def test_output_independent_of_every_wrt_value_is_an_error():
    def body(e: Emitter, x: SSAValue) -> SSAValue:
        return e.const(2.0, x)

    module = build(body, [(2,)], grad=True, square=False)
    with pytest.raises(GradfuseError) as info:
        apply(module, TgAutodiffPass())
    assert "backward(): the output does not depend on any of the values" in str(info.value)
    assert info.value.position is not None
    assert (info.value.position.file, info.value.position.line) == ("model.py", 99)
    assert not getattr(info.value, "__notes__", [])  # no printed module attached


def test_gradient_ops_carry_backward_provenance_of_their_forward_op():
    def body(e: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
        return e.mul(e.sin(x), y)  # sin at line 1, mul at line 2

    module = build(body, [(3,), (3,)], grad=True, square=False)
    forward = {id(op) for op in module.walk()}
    apply(module, TgAutodiffPass())
    new_ops = [op for op in module.walk() if id(op) not in forward]
    assert new_ops
    lines = set()
    for op in new_ops:
        assert isinstance(op.location, NameLoc)
        prov = provenance_of(op.location)
        assert prov.direction == "backward" and prov.file == "model.py"
        lines.add(prov.line)
    assert lines == {1, 2, 99}  # sin, mul, and the seed from the grad op


def test_no_op_is_emitted_for_values_not_needing_gradients():
    def body(e: Emitter, x: SSAValue, y: SSAValue) -> SSAValue:
        return e.mul(x, y)

    module = apply(build(body, [(3,), (3,)], grad=True, wrt=[0], square=False), TgAutodiffPass())
    # seed, one mul for x's gradient; y's gradient (mul seed, x) is never built
    assert len(ops_named(module, "tg.mul")) == 2


def test_second_order_gradient():
    def body(e: Emitter, x: SSAValue) -> SSAValue:
        return e.mul(e.mul(x, x), x)

    block = Block(arg_types=[tensor([3])])
    e = Emitter(Builder(InsertPoint.at_end(block)), model_loc(1))
    (x,) = block.args
    first = e.emit(tg.GradOp(body(e, x), [x]))  # 3x^2
    second = e.emit(tg.GradOp(first, [x]))  # 6x
    e.builder.insert(func.ReturnOp(first, second))
    fn = func.FuncOp(
        "main", FunctionType.from_lists([tensor([3])], [tensor([3])] * 2), Region(block)
    )
    module = apply(ModuleOp([fn]), TgAutodiffPass())
    xs = np.array([0.5, -1.0, 2.0])
    g1, g2 = run(module, args=[xs], dtype=np.float64).results
    np.testing.assert_allclose(g1, 3 * xs**2)
    np.testing.assert_allclose(g2, 6 * xs)


def sgd_loop_module(steps: int, lr: float) -> ModuleOp:
    """`func @main(%x: 3x2, %y: 3)`: `steps` SGD steps on `w` for sum((x @ w - y)^2)."""
    block = Block(arg_types=[tensor([3, 2]), tensor([3])])
    x, y = block.args
    outer = Builder(InsertPoint.at_end(block))
    loop = tg.ForOp(0, steps, 1, [])
    outer.insert(loop)
    e = Emitter(Builder(InsertPoint.at_end(loop.body.block)), model_loc(7))
    w = e.emit(tg.ParamOp("w", tensor([2]), init=0.1))
    pred = e.reduce_sum(e.mul(x, e.broadcast(e.reshape(w, [1, 2]), [3, 2])), [1])
    diff = e.sub(pred, y)
    loss = e.reduce_sum(e.mul(diff, diff), [0])
    g = e.emit(tg.GradOp(loss, [w]))
    e.builder.insert(tg.AssignOp("w", e.sub(w, e.scale(g, lr))))
    e.builder.insert(tg.YieldOp([]))
    outer.insert(func.ReturnOp())
    fn_type = FunctionType.from_lists([a.type for a in block.args], [])
    return ModuleOp([func.FuncOp("main", fn_type, Region(block))])


def test_grad_inside_a_for_body_trains_a_param():
    module = apply(sgd_loop_module(steps=5, lr=0.05), TgAutodiffPass())
    assert not ops_named(module, "tg.grad")
    x, y = random_inputs([(3, 2), (3,)], seed=3)
    got = run(module, args=[x, y], dtype=np.float64).params["w"]
    w = np.full(2, 0.1)
    for _ in range(5):
        w = w - 0.05 * 2 * x.T @ (x @ w - y)
    np.testing.assert_allclose(got, w, rtol=1e-10)


def test_reduce_max_splits_ties_evenly():
    module = build(lambda e, x: e.reduce_max(x, [1]), [(2, 3)], grad=True, square=False)
    apply(module, TgAutodiffPass())
    xs = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    grad = run(module, args=[xs], dtype=np.float64).results[1]
    np.testing.assert_allclose(grad, [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


def test_max_and_relu_send_ties_to_zero_for_relu():
    for body in (lambda e, x: e.max(x, e.const(0.0, x)), lambda e, x: e.emit(tg.ReluOp(x))):
        module = apply(build(body, [(3,)], grad=True, square=False), TgAutodiffPass())
        grad = run(module, args=[np.array([-1.0, 0.0, 2.0])], dtype=np.float64).results[1]
        np.testing.assert_array_equal(grad, [0.0, 0.0, 1.0])
