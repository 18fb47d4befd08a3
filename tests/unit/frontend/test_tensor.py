"""Tracing: each Tensor operation records the expected tg ops with the right shapes."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Tensor, where
from gradfuse.diagnostics import GradfuseError


def feeder(*shape: int, name: str = "x") -> Tensor:
    return Feeder(lambda: np.zeros(shape, np.float32), shape=list(shape), name=name)


def op_names() -> list[str]:
    """The tg op names of the recorded program, in order (no func ops)."""
    return re.findall(r"\btg\.\w+", gradfuse.ir_text())


def test_binary_op_records_one_op() -> None:
    a, b = feeder(2, 3, name="a"), feeder(2, 3, name="b")
    c = a + b
    assert isinstance(c, Tensor) and c.shape == (2, 3)
    assert op_names() == ["tg.feeder", "tg.feeder", "tg.add"]


@pytest.mark.parametrize(
    ("left", "right", "result"),
    [
        ((2, 3), (3,), (2, 3)),
        ((4, 1), (1, 5), (4, 5)),
        ((2, 1, 3), (4, 1), (2, 4, 3)),
        ((3,), (), (3,)),
    ],
)
def test_broadcasting_follows_numpy(left: tuple, right: tuple, result: tuple) -> None:
    a, b = feeder(*left, name="a"), feeder(*right, name="b")
    assert (a * b).shape == result == np.broadcast_shapes(left, right)
    assert "tg.broadcast" in op_names()


def test_broadcast_of_lower_rank_reshapes_first() -> None:
    a, b = feeder(2, 3, name="a"), feeder(3, name="b")
    _ = a - b
    assert op_names() == ["tg.feeder", "tg.feeder", "tg.reshape", "tg.broadcast", "tg.sub"]


def test_scalars_become_splat_constants() -> None:
    x = feeder(2, 3)
    _ = 2.0 * x + 1
    text = gradfuse.ir_text()
    assert "tg.constant 2.0 : tensor<2x3xf32>" in text
    assert "tg.constant 1.0 : tensor<2x3xf32>" in text


def test_unary_functions_use_primitives_and_composites() -> None:
    x = feeder(4)
    x.exp(), x.log(), x.sqrt(), x.abs(), x.relu(), x.sigmoid(), x.tanh(), -x
    names = op_names()
    for name in (
        "tg.exp2",
        "tg.log2",
        "tg.sqrt",
        "tg.cmplt",  # (abs: x times its sign)
        "tg.neg",
        "tg.relu",
        "tg.sigmoid",
        "tg.tanh",
    ):
        assert name in names


def test_pow_and_division() -> None:
    x = feeder(4)
    assert op_names()[-1] == "tg.feeder"
    _ = x**2
    assert op_names()[-1] == "tg.mul"
    _ = x**-1
    assert op_names()[-1] == "tg.recip"
    _ = x**0.5
    assert op_names()[-1] == "tg.sqrt"
    _ = 1.0 / x
    assert op_names()[-1] == "tg.div"


def test_comparisons_give_masks_and_where_selects() -> None:
    x = feeder(2, 3)
    m = x > 0.0
    assert m.dtype == np.dtype(bool)
    assert (x <= 1.0).dtype == np.dtype(bool)
    y = where(m, x, 0.0)
    assert y.shape == (2, 3) and y.dtype == np.float32
    assert "tg.cmplt" in op_names() and "tg.where" in op_names()


@pytest.mark.parametrize("backend", ["reference", "c", "cuda"])
def test_every_comparison_is_an_elementwise_mask_as_in_numpy(backend: str) -> None:
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)
    b = np.array([2.0, 2.0, 2.0], np.float32)
    x, y = Feeder(lambda: a, shape=[2, 3]), Feeder(lambda: b, shape=[3])
    got: list[np.ndarray] = []
    masks = [x < y, x > y, x <= y, x >= y, x == y, x != y, x == 2.0, x != 2.0]
    gradfuse.Receiver(lambda *m: got.extend(m), [m.float() for m in masks])
    gradfuse.execute(backend)
    want = [a < b, a > b, a <= b, a >= b, a == b, a != b, a == 2.0, a != 2.0]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.astype(np.float32))
    assert len({x, y}) == 2  # tracers hash by identity


@pytest.mark.parametrize(
    ("dim", "keepdim", "shape"),
    [(None, False, ()), (0, False, (3, 4)), (-1, True, (2, 3, 1)), ((0, 2), False, (3,))],
)
def test_reductions(dim: object, keepdim: bool, shape: tuple) -> None:
    x = feeder(2, 3, 4)
    assert x.sum(dim, keepdim).shape == shape  # type: ignore[arg-type]
    assert x.amax(dim, keepdim).shape == shape  # type: ignore[arg-type]
    assert x.mean(dim, keepdim).shape == shape  # type: ignore[arg-type]


def test_mean_is_a_composite_that_decomposes_to_sum_times_reciprocal_count() -> None:
    x = feeder(2, 4)
    gradfuse.Receiver(lambda m: None, x.mean(1), name="m")
    assert op_names()[1:] == ["tg.reduce_mean", "tg.receiver"]
    text = gradfuse.ir_text(after="tg-decompose")
    assert "tg.reduce_sum" in text and "tg.reduce_mean" not in text
    assert "tg.constant 0.25" in text


def test_movement() -> None:
    x = feeder(2, 3, 4)
    assert x.reshape(6, 4).shape == (6, 4)
    assert x.view(-1).shape == (24,)
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    assert x.transpose(0, 2).shape == (4, 3, 2)
    assert x.T.shape == (4, 3, 2)
    assert x.reshape(2, 3, 4) is not None and op_names().count("tg.reshape") == 2


def test_matmul_shapes() -> None:
    a, b, v = feeder(2, 3, name="a"), feeder(3, 5, name="b"), feeder(3, name="v")
    assert (a @ b).shape == (2, 5)
    assert (a @ v).shape == (2,)
    assert (v @ b).shape == (5,)
    batched = feeder(4, 2, 3, name="c")
    assert (batched @ b).shape == (4, 2, 5)


@pytest.mark.parametrize(
    ("key", "shape"),
    [
        (1, (3, 4)),
        ((slice(None), 0), (2, 4)),
        ((0, slice(1, 3)), (2, 4)),
        ((Ellipsis, slice(None, None, 2)), (2, 3, 2)),
        ((slice(None), None, -1), (2, 1, 4)),
    ],
)
def test_slicing_matches_numpy_shapes(key: object, shape: tuple) -> None:
    x = feeder(2, 3, 4)
    assert x[key].shape == shape == np.zeros((2, 3, 4))[key].shape


def test_an_empty_slice_is_an_error_at_the_users_line() -> None:
    x = feeder(2, 3, 4)
    with pytest.raises(GradfuseError, match="at least 1, got tensor<0x3x4xf32>") as info:
        _ = x[5:9]
    assert "test_tensor.py:" in str(info.value)


def test_slicing_records_slice_and_reshape() -> None:
    x = feeder(4, 6)
    _ = x[1, 1:6:2]
    text = gradfuse.ir_text()
    assert "tg.slice %0 starts=[1, 1] limits=[2, 6] strides=[1, 2] : tensor<1x3xf32>" in text
    assert "tg.reshape" in text


def test_full_slice_records_nothing() -> None:
    x = feeder(4, 6)
    assert x[:, :] is not x
    assert op_names() == ["tg.feeder"]


def test_shape_error_points_at_the_users_line() -> None:
    a, b = feeder(2, 255, name="a"), feeder(254, 255, name="b")
    line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with pytest.raises(GradfuseError) as info:
        a @ b
    message = str(info.value)
    assert message.startswith(f"tests/unit/frontend/test_tensor.py:{line}:")
    assert "tg.dot: inner dimensions differ: 2x255 @ 254x255" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # the failed op is not left in the program
    assert op_names().count("tg.dot") == 0


def test_broadcast_error_names_the_op() -> None:
    a, b = feeder(2, 3, name="a"), feeder(4, name="b")
    with pytest.raises(
        GradfuseError, match=r"test_tensor.py:\d+:\d+: error: tg.add: shapes cannot be broadcast"
    ):
        a + b


def test_backward_sets_grads_of_the_params_used() -> None:
    w = Parameter(np.ones((3, 2), np.float32), name="w")
    unused = Parameter(np.ones(2, np.float32), name="unused")
    y = feeder(4, 3) @ w
    y.backward()
    assert w.grad is not None and w.grad.shape == (3, 2)
    assert unused.grad is None
    assert "tg.grad %2 wrt %1" in gradfuse.ir_text()


def test_backward_on_an_independent_tensor_says_so() -> None:
    Parameter(np.ones(2, np.float32), name="w")
    with pytest.raises(GradfuseError, match="does not depend on any parameter"):
        (feeder(2) * 2.0).backward()


def test_tensor_from_an_ir_for_body_cannot_be_used_outside() -> None:
    kept: list[Tensor] = []
    gradfuse.ir_for(range(3), lambda: kept.append(feeder(2)))
    with pytest.raises(GradfuseError, match="inside an ir_for body"):
        kept[0] + 1.0


def test_a_traced_tensor_has_no_truth_value() -> None:
    x = feeder(2)
    with pytest.raises(GradfuseError, match="gradfuse.where"):
        if x > 0.0:
            pass


def test_numpy_operands_are_rejected_but_numpy_scalars_work() -> None:
    x = feeder(2)
    assert (x * np.float32(2.0)).shape == (2,)
    with pytest.raises(GradfuseError, match="got ndarray"):
        np.ones(2) * x


def test_iterating_gives_rows() -> None:
    rows = list(feeder(3, 2))
    assert len(rows) == 3 and all(r.shape == (2,) for r in rows)


@pytest.mark.parametrize("backend", ["reference", "c", "cuda"])
def test_detach_stops_the_gradient_as_in_pytorch(backend: str) -> None:
    w0 = np.array([0.5, -1.5, 2.0], np.float32)
    w = Parameter(w0.copy(), name="w")
    (w * w.detach()).sum().backward()  # d/dw sum(w * c) with c = w held constant: c
    grads: list[np.ndarray] = []
    gradfuse.Receiver(grads.append, w.grad, name="g")
    assert "tg.stop_gradient" in gradfuse.ir_text()
    gradfuse.execute(backend)
    np.testing.assert_allclose(grads[0], w0)  # not 2 * w0, the gradient of sum(w * w)
