"""Program semantics of the reference interpreter: loops, params, feeders, receivers, errors."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.utils.exceptions import VerifyException

from gradfuse.backend.interpreters.tg import RunResult, run, run_value
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg import tensor

T2 = tensor([2])


def counting_loop(fb, trips: int, *, feeder: bool = True, receiver: bool = True) -> ModuleOp:
    """`w` starts at 1; each iteration adds the feeder `x` to it and sends it to "w"."""
    b = fb()
    b(tg.ParamOp("w", T2, 1.0))
    loop = tg.ForOp(0, trips, 1, [])
    body = fb(block=loop.body.block)
    w = body(tg.ParamOp("w", T2))
    x = body(tg.FeederOp("x", T2)) if feeder else body(tg.ConstantOp(1.0, T2))
    w2 = body(tg.AddOp(w, x))
    body(tg.AssignOp("w", w2))
    if receiver:
        body(tg.ReceiverOp("w", [w2]))
    body(tg.YieldOp([]))
    b(loop)
    return b.module()


# --- loops -----------------------------------------------------------------------------


def test_for_carries_values(fb):
    b = fb(T2, T2)
    loop = tg.ForOp(0, 6, 2, [b.args[0], b.args[1]])  # 3 iterations
    body = fb(block=loop.body.block)
    _, a, s = body.args
    doubled = body(tg.AddOp(a, a))
    total = body(tg.AddOp(s, doubled))
    body(tg.YieldOp([doubled, total]))
    b(loop)
    module = b.module(*loop.results)
    a_out, s_out = run(module, args=[np.ones(2), np.zeros(2)]).results
    np.testing.assert_array_equal(a_out, [8, 8])
    np.testing.assert_array_equal(s_out, [14, 14])  # 2 + 4 + 8


def test_zero_trip_loop_returns_inits(fb):
    b = fb(T2)
    loop = tg.ForOp(3, 3, 1, [b.args[0]])
    body = fb(block=loop.body.block)
    body(tg.YieldOp([body(tg.NegOp(body.args[1]))]))
    b(loop)
    np.testing.assert_array_equal(run_value(b.module(loop.results[0]), np.ones(2)), [1, 1])


# --- params ----------------------------------------------------------------------------


def test_params_persist_across_iterations(fb):
    result = run(counting_loop(fb, 4, feeder=False))
    np.testing.assert_array_equal(result.params["w"], [5, 5])
    assert [calls[0].tolist() for calls in result.received["w"]] == [[2, 2], [3, 3], [4, 4], [5, 5]]


def test_given_params_override_init_and_are_not_mutated(fb):
    given = {"w": np.array([10.0, 20.0], np.float32), "unused": np.zeros(3)}
    result = run(counting_loop(fb, 2, feeder=False), params=given)
    np.testing.assert_array_equal(result.params["w"], [12, 22])
    np.testing.assert_array_equal(given["w"], [10, 20])
    assert "unused" in result.params


def test_param_dense_init(fb):
    b = fb()
    init = np.array([1.5, -2.0], np.float32)
    attr = DenseIntOrFPElementsAttr.from_list(T2, init.tolist())
    out = run_value(b.module(b(tg.ParamOp("w", T2, attr))))
    np.testing.assert_array_equal(out, init)


def test_param_without_initial_value(fb):
    b = fb()
    module = b.module(b(tg.ParamOp("w", T2)))
    with pytest.raises(GradfuseError) as err:
        run(module)
    assert err.value.message == (
        'param "w" has no initial value (give it init=... or pass --params)'
    )
    np.testing.assert_array_equal(run_value(module, params={"w": np.ones(2)}), [1, 1])


def test_param_read_with_two_types(fb):  # the verifier rejects it, before any backend
    b = fb()
    b(tg.ParamOp("w", T2, 0.0))
    with pytest.raises(
        VerifyException, match=r'param "w" is read with two types: tensor<2xf32> and'
    ):
        b.module(b(tg.ParamOp("w", tensor([3]), 0.0)))


def test_given_param_of_wrong_shape(fb):
    b = fb()
    module = b.module(b(tg.ParamOp("w", T2)))
    with pytest.raises(GradfuseError, match=r'param "w": given float64 value of shape \(3,\)'):
        run(module, params={"w": np.zeros(3)})


def test_assign_of_wrong_shape(fb):
    b = fb()
    b(tg.ParamOp("w", T2, 0.0))
    b(tg.AssignOp("w", b(tg.ConstantOp(1.0, tensor([3])))))
    with pytest.raises(VerifyException, match=r"tg.assign: value type tensor<3xf32> differs"):
        b.module()


# --- feeders and receivers ----------------------------------------------------------------


def test_feeder_fixed_array(fb):
    result = run(counting_loop(fb, 3), feeders={"x": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(result.params["w"], [4, 7])


def test_feeder_array_per_call(fb):
    xs = np.arange(6, dtype=np.float32).reshape(3, 2)
    result = run(counting_loop(fb, 3), feeders={"x": xs})
    np.testing.assert_array_equal(result.params["w"], 1 + xs.sum(axis=0))


def test_feeder_callable_called_each_time(fb):
    calls = []

    def feed():
        calls.append(1)
        return np.full(2, len(calls), np.float32)

    result = run(counting_loop(fb, 3), feeders={"x": feed})
    assert len(calls) == 3
    np.testing.assert_array_equal(result.params["w"], [7, 7])  # 1 + 1 + 2 + 3
    assert result.params["w"].dtype == np.float32


def test_receiver_gets_copies_and_everything_is_recorded(fb):
    got = []

    def receive(w):
        got.append(w.copy())
        w[:] = -100  # must not change what the run recorded

    result = run(counting_loop(fb, 2, feeder=False), receivers={"w": receive})
    assert [g.tolist() for g in got] == [[2, 2], [3, 3]]
    assert isinstance(result, RunResult)
    assert [c[0].tolist() for c in result.received["w"]] == [[2, 2], [3, 3]]


def test_receiver_with_several_operands(fb):
    b = fb(T2, T2)
    b(tg.ReceiverOp("pair", [b.args[0], b.args[1]]))
    result = run(b.module(), args=[np.ones(2), np.zeros(2)], receivers={"pair": lambda a, z: None})
    ((a, z),) = result.received["pair"]
    np.testing.assert_array_equal(a, [1, 1])
    np.testing.assert_array_equal(z, [0, 0])


def test_missing_feeder(fb):
    with pytest.raises(GradfuseError) as err:
        run(counting_loop(fb, 3), feeders={"y": np.zeros(2)})
    assert err.value.message.startswith('feeder "x" (call 0): no data given for it')


def test_feeder_returning_wrong_shape(fb):
    with pytest.raises(GradfuseError) as err:
        run(counting_loop(fb, 3), feeders={"x": lambda: np.zeros(3)})
    assert err.value.message.startswith('feeder "x" (call 0): returned shape (3,), expected (2,)')


def test_feeder_array_of_wrong_shape(fb):
    with pytest.raises(
        GradfuseError, match=r"array of shape \(2, 3\) is neither \(2,\) nor \(N, 2\)"
    ):
        run(counting_loop(fb, 3), feeders={"x": np.zeros((2, 3))})


def test_feeder_returning_strings(fb):
    with pytest.raises(GradfuseError, match=r'feeder "x" \(call 0\): returned <U1 data, expected'):
        run(counting_loop(fb, 3), feeders={"x": lambda: np.array(["a", "b"])})


def test_feeder_callable_raising(fb):
    def feed():
        raise RuntimeError("disk on fire")

    with pytest.raises(GradfuseError, match=r'feeder "x" \(call 0\): raised RuntimeError: disk'):
        run(counting_loop(fb, 3), feeders={"x": feed})


def test_receiver_callable_raising(fb):
    with pytest.raises(GradfuseError, match=r'receiver "w" \(call 0\): raised ZeroDivisionError'):
        run(counting_loop(fb, 3, feeder=False), receivers={"w": lambda w: 1 / 0})


def test_error_in_iteration_keeps_params_of_last_finished_iteration(fb):
    xs = np.ones((3, 2), np.float32)  # enough for 3 of the 5 iterations
    with pytest.raises(GradfuseError) as err:
        run(counting_loop(fb, 5), feeders={"x": xs})
    assert err.value.message == (
        'feeder "x" (call 3): exhausted, its array of shape (3, 2) has 3 items'
        " (in iteration 3 (i = 3) of the tg.for)"
    )


def test_error_carries_params_of_last_finished_iteration(fb):
    with pytest.raises(GradfuseError) as err:
        run(counting_loop(fb, 5), feeders={"x": np.ones((3, 2), np.float32)})
    np.testing.assert_array_equal(err.value.params["w"], [4, 4])  # 1 + three full iterations
    assert len(err.value.received["w"]) == 3


def test_error_in_nested_loop_names_both_iterations(fb):
    b = fb()
    b(tg.ParamOp("w", T2, 0.0))
    outer = tg.ForOp(0, 3, 1, [])
    ob = fb(block=outer.body.block)
    inner = tg.ForOp(0, 4, 2, [])
    ib = fb(block=inner.body.block)
    ib(tg.AssignOp("w", ib(tg.AddOp(ib(tg.ParamOp("w", T2)), ib(tg.FeederOp("x", T2))))))
    ib(tg.YieldOp([]))
    ob(inner)
    ob(tg.YieldOp([]))
    b(outer)
    module = b.module()
    calls = []

    def feed():
        calls.append(0)
        if len(calls) == 6:
            raise ValueError("no more")
        return np.ones(2, np.float32)

    with pytest.raises(GradfuseError) as err:
        run(module, feeders={"x": feed})
    assert err.value.message.endswith(
        "(in iteration 2 (i = 2) of the tg.for, iteration 1 (i = 2) of the tg.for)"
    )
    np.testing.assert_array_equal(err.value.params["w"], [4, 4])  # outer iterations 0 and 1


def test_error_position_comes_from_the_location(parse):
    module = parse(
        """
"builtin.module"() ({
  "func.func"() <{sym_name = "main", function_type = () -> tensor<2xf32>}> ({
    %x = "tg.feeder"() <{key = "images"}> : () -> tensor<2xf32> loc("model.tg":4:7)
    "func.return"(%x) : (tensor<2xf32>) -> ()
  }) : () -> ()
}) : () -> ()
"""
    )
    with pytest.raises(GradfuseError) as err:
        run(module, feeders={"images": lambda: np.zeros((2, 3))})
    assert str(err.value) == (
        'model.tg:4:7: error: feeder "images" (call 0): returned shape (2, 3), expected (2,) (2)'
    )


# --- grad, entry, arguments -------------------------------------------------------------------


def test_grad_must_be_expanded_first(fb):
    b = fb(T2)
    s = b(tg.ReduceSumOp(b.args[0], [0]))
    module = b.module(b(tg.GradOp(s, [b.args[0]])))
    with pytest.raises(GradfuseError, match="must be expanded by the `tg-autodiff` pass first"):
        run(module, args=[np.ones(2)])


def test_entry_by_name_and_func_call(fb):
    helper = fb(T2)
    helper_fn = helper.func("double", helper(tg.AddOp(helper.args[0], helper.args[0])))
    b = fb(T2)
    call = b(func.CallOp("double", [b.args[0]], [T2]))
    main = b.func("main", call)
    other = fb(T2)
    other_fn = other.func("other", other(tg.NegOp(other.args[0])))
    module = ModuleOp([helper_fn, main, other_fn])
    module.verify()
    np.testing.assert_array_equal(run_value(module, np.ones(2)), [2, 2])
    np.testing.assert_array_equal(run_value(module, np.ones(2), entry="other"), [-1, -1])
    with pytest.raises(GradfuseError, match=r"no entry function @nope in the module \(functions:"):
        run(module, args=[np.ones(2)], entry="nope")


def test_only_function_is_the_entry(fb):
    b = fb(T2)
    module = ModuleOp([b.func("step", b(tg.NegOp(b.args[0])))])
    np.testing.assert_array_equal(run_value(module, np.ones(2)), [-1, -1])


def test_wrong_arguments(fb):
    b = fb(T2)
    module = b.module(b(tg.NegOp(b.args[0])))
    with pytest.raises(GradfuseError, match=r"@main takes 1 argument\(s\), 0 given"):
        run(module)
    with pytest.raises(GradfuseError, match=r"argument 0 of @main: got float64 array of shape 3"):
        run(module, args=[np.ones(3)])


def test_unverified_module_error_names_the_op(fb):
    b = fb(tensor([2, 3]), tensor([4, 5]))
    out = b(tg.DotOp(b.args[0], b.args[1]))  # not verified: inner dimensions differ
    module = ModuleOp([b.func("main", out)])
    with pytest.raises(GradfuseError, match=r"^error: tg.dot: "):
        run(module, args=[np.ones((2, 3)), np.ones((4, 5))])
