"""New modules and functions, each against float64 NumPy (and PyTorch when importable)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numpy_nn import V, attention, gelu, layer_norm

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, Tensor, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import (
    GELU,
    SGD,
    BCELoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    LayerNorm,
    LogSoftmax,
    MSELoss,
    MultiheadAttention,
    Softmax,
    TransformerEncoderLayer,
)

RNG = np.random.default_rng(0)


def run64(fn: Callable[..., Tensor | tuple], *arrays: np.ndarray) -> np.ndarray:
    """`fn` of feeders holding `arrays`, computed by the reference backend in float64."""
    inputs = [Feeder(lambda a=a: a, shape=a.shape, name=f"in{i}") for i, a in enumerate(arrays)]
    out: list[np.ndarray] = []
    result = fn(*inputs)
    Receiver(out.append, result[0] if isinstance(result, tuple) else result)
    execute(backend="reference", dtype=np.float64)
    return out[0]


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.normal(size=shape) * scale).astype(np.float32)


def test_layer_norm_matches_numpy() -> None:
    norm = LayerNorm(8, eps=1e-3)
    norm.load_state_dict({"weight": f32(8), "bias": f32(8)})
    x = f32(3, 4, 8, scale=3.0)
    want = layer_norm(V(x), V(norm.weight.data), V(norm.bias.data), eps=1e-3).value  # type: ignore[union-attr]
    np.testing.assert_allclose(run64(norm, x), want, rtol=1e-12, atol=1e-12)


def test_layer_norm_over_two_dims_without_affine() -> None:
    norm = LayerNorm([4, 8], elementwise_affine=False)
    assert norm.state_dict() == {}
    x = f32(3, 4, 8)
    flat = x.reshape(3, 32).astype(np.float64)
    want = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(run64(norm, x), want.reshape(3, 4, 8), rtol=1e-12, atol=1e-12)
    with pytest.raises(GradfuseError, match="does not end with the normalized shape"):
        norm(Feeder(lambda: x, shape=[3, 8, 4]))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_numpy(approximate: str) -> None:
    x = f32(4, 6, scale=2.0)
    want = gelu(V(x), approximate).value
    np.testing.assert_allclose(run64(GELU(approximate), x), want, rtol=1e-12, atol=1e-12)


def test_softmax_and_log_softmax_are_stable() -> None:
    x = f32(3, 5, scale=4.0) + np.float32(1000.0)  # exp would overflow without max-subtraction
    shifted = x.astype(np.float64) - x.max(0, keepdims=True)
    want = np.exp(shifted) / np.exp(shifted).sum(0, keepdims=True)
    np.testing.assert_allclose(run64(Softmax(dim=0), x), want, rtol=1e-12)
    np.testing.assert_allclose(run64(LogSoftmax(dim=0), x), np.log(want), rtol=1e-10, atol=1e-12)


def test_embedding_forward_backward() -> None:
    emb = Embedding(10, 4)
    table = emb.weight.data.astype(np.float64)
    assert table.shape == (10, 4) and abs(float(table.std()) - 1.0) < 0.5  # N(0, 1)
    ids = np.array([[1, 3, 3], [9, 0, 1]], np.float32)
    np.testing.assert_array_equal(run64(emb, ids), table[ids.astype(int)])
    opt = SGD(emb.parameters(), lr=0.5)
    opt.zero_grad()
    emb(Feeder(lambda: ids, shape=[2, 3])).sum().backward()
    opt.step()
    execute(backend="reference", dtype=np.float64)
    counts = np.bincount(ids.astype(int).ravel(), minlength=10)[:, None]
    np.testing.assert_allclose(emb.weight.data, table - 0.5 * counts, rtol=1e-6)


def test_embedding_out_of_range_ids_are_an_error() -> None:
    emb = Embedding(5, 2)
    emb(Feeder(lambda: np.array([1.0, 7.0], np.float32), shape=[2], name="tokens")).sum()
    Receiver(lambda y: None, emb(Feeder(lambda: np.array([7.0], np.float32), shape=[1])))
    with pytest.raises(GradfuseError, match=r'feeder "tokens" \(call 0\): raised ValueError:'):
        execute(backend="reference")
    # ids computed from a feeder are not checked on the host; the interpreter's gather is
    tokens = Feeder(lambda: np.array([1.0, 7.0], np.float32), shape=[2], name="tokens")
    Receiver(lambda y: None, emb(tokens + 0.0))
    with pytest.raises(GradfuseError, match=r"tg.gather: indices must be integers in \[0, 5\)"):
        execute(backend="reference")


def grad_of(loss: Callable[[Tensor], Tensor], z0: np.ndarray) -> tuple[float, np.ndarray]:
    """The loss value and its gradient wrt `z0`, in float64."""
    z = Parameter(z0.copy(), name="z")
    value = loss(z)
    value.backward()
    out: list[np.ndarray] = []
    Receiver(lambda *v: out.extend(v), [value, z.grad])  # type: ignore[list-item]
    execute(backend="reference", dtype=np.float64)
    return float(out[0]), out[1]


def test_mse_loss_value_and_gradient() -> None:
    y, t = f32(4, 3), f32(4, 3)
    target = Feeder(lambda: t, shape=[4, 3])
    value, grad = grad_of(lambda z: MSELoss()(z, target), y)
    d = y.astype(np.float64) - t
    assert value == pytest.approx(float((d * d).mean()), rel=1e-12)
    np.testing.assert_allclose(grad, 2 * d / d.size, rtol=1e-6, atol=1e-9)
    assert run64(lambda a, b: MSELoss(reduction="sum")(a, b), y, t) == pytest.approx(
        float((d * d).sum()), rel=1e-12
    )


@pytest.mark.parametrize("shape", [(6, 5), (2, 5, 3)])
def test_cross_entropy_value_and_gradient(shape: tuple[int, ...]) -> None:
    logits = f32(*shape, scale=2.0)
    labels = RNG.integers(0, 5, size=shape[:1] + shape[2:]).astype(np.float32)
    target = Feeder(lambda: labels, shape=labels.shape, name="labels")
    value, grad = grad_of(lambda z: CrossEntropyLoss()(z, target), logits)
    z = np.moveaxis(logits.astype(np.float64), 1, -1)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    onehot = np.eye(5)[labels.astype(int)]
    assert value == pytest.approx(float(-(np.log(p) * onehot).sum(-1).mean()), rel=1e-10)
    np.testing.assert_allclose(grad, np.moveaxis((p - onehot) / labels.size, -1, 1), atol=1e-7)


def test_cross_entropy_with_a_wrong_target_shape_says_so() -> None:
    logits = Feeder(lambda: f32(6, 5), shape=[6, 5])
    with pytest.raises(GradfuseError, match="without its class dim 1"):
        CrossEntropyLoss()(logits, Feeder(lambda: np.zeros(5, np.float32), shape=[5]))


def test_bce_loss_value_and_gradient() -> None:
    probs = RNG.uniform(0.05, 0.95, size=(4, 3)).astype(np.float32)
    t = RNG.integers(0, 2, size=(4, 3)).astype(np.float32)
    target = Feeder(lambda: t, shape=[4, 3])
    value, grad = grad_of(lambda z: BCELoss()(z, target), probs)
    p = probs.astype(np.float64)
    assert value == pytest.approx(float(-(t * np.log(p) + (1 - t) * np.log(1 - p)).mean()))
    np.testing.assert_allclose(grad, (p - t) / (p * (1 - p)) / p.size, rtol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_numpy(batch_first: bool) -> None:
    mha = MultiheadAttention(8, 2, batch_first=batch_first)
    mha.load_state_dict({k: v + f32(*v.shape, scale=0.1) for k, v in mha.state_dict().items()})
    x = f32(2, 3, 8)
    p = {k: V(v) for k, v in mha.state_dict().items()}
    want = attention(p, V(x), 2).value
    xin = x if batch_first else x.transpose(1, 0, 2).copy()
    got = run64(lambda a: mha(a, a, a, need_weights=False), xin)
    np.testing.assert_allclose(got if batch_first else got.transpose(1, 0, 2), want, rtol=1e-10)
    got = run64(lambda a: mha(a[0], a[0], a[0])[0], xin if batch_first else x)  # unbatched
    np.testing.assert_allclose(got, want[0], rtol=1e-10)


def test_multihead_attention_init_and_errors() -> None:
    mha = MultiheadAttention(12, 3)
    state = mha.state_dict()
    assert list(state) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    bound = math.sqrt(6 / (12 + 36))  # xavier-uniform of [36, 12]
    assert np.abs(state["in_proj_weight"]).max() <= bound
    assert np.abs(state["in_proj_weight"]).max() > 0.9 * bound
    with pytest.raises(GradfuseError, match="multiple of num_heads"):
        MultiheadAttention(10, 3)


def torch_mha(torch: Any, batch_first: bool) -> tuple[Any, MultiheadAttention]:
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    with torch.no_grad():
        for prm in tm.parameters():
            prm.add_(torch.randn_like(prm) * 0.1)
    mha = MultiheadAttention(8, 2, batch_first=batch_first)
    mha.load_state_dict(tm.state_dict())
    return tm, mha


def test_multihead_attention_masks_and_weights_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    tm, mha = torch_mha(torch, batch_first=True)
    q, kv = f32(2, 3, 8), f32(2, 4, 8)
    causal = np.triu(np.ones((3, 4), bool), 1)
    padding = np.array([[False, False, False, True], [False, True, False, False]])
    want, want_w = tm(
        torch.tensor(q), torch.tensor(kv), torch.tensor(kv),
        attn_mask=torch.tensor(causal), key_padding_mask=torch.tensor(padding),
    )  # fmt: skip
    out: list[np.ndarray] = []
    a = Feeder(lambda: q, shape=q.shape, name="q")
    b = Feeder(lambda: kv, shape=kv.shape, name="kv")
    y, w = mha(a, b, b, attn_mask=causal, key_padding_mask=padding)
    Receiver(lambda *v: out.extend(v), [y, w])  # type: ignore[list-item]
    execute(backend="reference")
    np.testing.assert_allclose(out[0], want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[1], want_w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_erf_gather_scatter_add() -> None:
    x = f32(3, 4)
    idx = np.array([[3, 0], [1, 1], [2, 3]], np.float32)
    got = run64(lambda a, i: gradfuse.gather(a, 1, i), x, idx)
    np.testing.assert_array_equal(got, np.take_along_axis(x, idx.astype(int), 1))
    got = run64(lambda i, s: gradfuse.scatter_add(i, s, 1, [3, 4]), idx, f32(3, 2))
    assert got.shape == (3, 4) and got[1, 1] != 0 and got[1, 0] == 0
    got = run64(gradfuse.erf, x)
    np.testing.assert_allclose(got, [[math.erf(v) for v in row] for row in x], rtol=1e-12)


def test_rand_changes_every_iteration_and_is_reproducible() -> None:
    def draws() -> list[np.ndarray]:
        got: list[np.ndarray] = []
        ir_for(range(3), lambda: Receiver(got.append, gradfuse.rand(1000)))
        execute(backend="reference")
        return got

    gradfuse.manual_seed(5)
    first = draws()
    gradfuse.manual_seed(5)
    assert all(np.array_equal(a, b) for a, b in zip(first, draws()))
    assert not np.array_equal(first[0], first[1])
    u = np.concatenate(first)
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(float(u.mean()) - 0.5) < 0.03


def test_dropout_records_nothing_when_off() -> None:
    x = Feeder(lambda: f32(4, 4), shape=[4, 4])
    Dropout(0.0)(x)
    Dropout(0.5).eval()(x)
    assert "tg.random" not in gradfuse.ir_text()
    layer = TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
    layer(Feeder(lambda: f32(2, 3, 8), shape=[2, 3, 8]))
    assert gradfuse.ir_text().count("tg.random") == 4  # attention weights, ff, two residuals
    gradfuse.reset()
    layer.eval()(Feeder(lambda: f32(2, 3, 8), shape=[2, 3, 8]))
    assert "tg.random" not in gradfuse.ir_text()


def test_dropout_masks_scale_differ_per_iteration_and_reproduce() -> None:
    x = np.ones((50, 40), np.float32)

    def masks() -> list[np.ndarray]:
        got: list[np.ndarray] = []
        drop = Dropout(0.25)
        ir_for(range(3), lambda: Receiver(got.append, drop(Feeder(lambda: x, shape=x.shape))))
        execute()
        return got

    gradfuse.manual_seed(3)
    first = masks()
    assert set(np.unique(first[0]).tolist()) == {0.0, np.float32(1 / 0.75)}
    assert abs(float((first[0] == 0).mean()) - 0.25) < 0.03
    assert not np.array_equal(first[0], first[1])
    gradfuse.manual_seed(3)
    assert all(np.array_equal(a, b) for a, b in zip(first, masks()))


def test_losses_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    logits, labels = f32(6, 5, 2), RNG.integers(0, 5, size=(6, 2)).astype(np.float32)
    probs = RNG.uniform(0.05, 0.95, size=(6, 5, 2)).astype(np.float32)
    nn = torch.nn
    cases = [
        (CrossEntropyLoss(label_smoothing=0.1), nn.CrossEntropyLoss(label_smoothing=0.1),
         logits, labels),
        (CrossEntropyLoss(reduction="none"), nn.CrossEntropyLoss(reduction="none"), logits, labels),
        (BCELoss(reduction="sum"), nn.BCELoss(reduction="sum"), probs, probs.round()),
        (MSELoss(), nn.MSELoss(), logits, probs),
    ]  # fmt: skip
    for ours, theirs, a, b in cases:
        gradfuse.reset()
        got = run64(lambda x, y, loss=ours: loss(x, y), a, b)  # type: ignore[misc]
        target = torch.tensor(b).long() if b is labels else torch.tensor(b, dtype=torch.float64)
        want = theirs(torch.tensor(a, dtype=torch.float64), target).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=repr(ours))
