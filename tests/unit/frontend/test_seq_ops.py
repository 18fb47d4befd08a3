"""cat, stack, squeeze, unsqueeze and masked_fill against PyTorch: outputs and gradients on
the reference interpreter and the c backend, and errors at the user's line.

Each case computes `out = f(inputs)` and backward of `sum(out * R)`. The movement ops
move values without arithmetic, so outputs and gradients equal PyTorch's exactly; the
softmax case is compared with a tolerance from a float64 run (see its test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, execute
from gradfuse.diagnostics import GradfuseError

torch = pytest.importorskip("torch")

BACKENDS = ["reference", "c", "cuda"]
Fn = Callable[..., Any]


def run_both(
    fn: Fn, shapes: list[tuple[int, ...]], backend: str, dtype: Any = torch.float32
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """[out, grads...] of `sum(fn(*inputs) * R)` from gradfuse (float32) and PyTorch (`dtype`);
    `fn` works on either framework's tensors."""
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    params = [Parameter(a, name=f"in{i}") for i, a in enumerate(arrays)]
    out = fn(*params)
    r = rng.normal(size=out.shape).astype(np.float32)
    (out * gradfuse.constant(r)).sum().backward()
    got: list[np.ndarray] = []
    grads = [p.grad for p in params if p.grad is not None]  # none through a mask
    Receiver(lambda *v: got.extend(v), [out, *grads], name="got")
    execute(backend=backend)
    ts = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
    tout = fn(*ts)
    (tout * torch.tensor(r, dtype=dtype)).sum().backward()
    assert [p.grad is None for p in params] == [t.grad is None for t in ts]
    want = [tout.detach().numpy()] + [t.grad.numpy() for t in ts if t.grad is not None]
    return got, want


def cat_stack(a: Any, b: Any, c: Any) -> Any:
    mod = gradfuse if isinstance(a, gradfuse.Tensor) else torch
    joined = mod.cat([a, b.transpose(0, 1), c], dim=-1)  # [2, 3] [2, 4] [2, 1] -> [2, 8]
    stacked = mod.stack([joined, joined * 2.0, joined], dim=1)
    return mod.stack((stacked, stacked + 1.0), -1)  # [2, 3, 8, 2]


def squeeze_unsqueeze(x: Any, y: Any) -> Any:
    # x [1, 3, 1, 2], y [3, 2]: squeeze a tuple and a non-1 dim (a no-op), unsqueeze at -1
    mod = gradfuse if isinstance(x, gradfuse.Tensor) else torch
    z = x.squeeze((0, 2)) * y.unsqueeze(0).squeeze(1).squeeze()
    return mod.unsqueeze(z, -1) + mod.squeeze(x, 0).squeeze(1).unsqueeze(0).unsqueeze(3)


def recurrent(x: Any, w: Any) -> Any:
    """A tanh RNN unrolled over 3 steps, its hidden states stacked along time (dim 1)."""
    mod = gradfuse if isinstance(x, gradfuse.Tensor) else torch
    h, states = x[:, 0] * 0.0, []
    for t in range(x.shape[1]):
        h = (x[:, t] + h @ w).tanh()
        states.append(h)
    return mod.stack(states, dim=1)


def masked(x: Any, y: Any, v: Any) -> Any:
    # x [2, 3, 4], mask from y [3, 1] broadcast; a number, then a 0-d tensor, as value
    filled = x.masked_fill(y > 0.3, 5.0) * 2.0
    return filled.masked_fill(x < -0.5, v.reshape(()))


CASES: dict[str, tuple[Fn, list[tuple[int, ...]]]] = {
    "cat-stack": (cat_stack, [(2, 3), (4, 2), (2, 1)]),
    "squeeze-unsqueeze": (squeeze_unsqueeze, [(1, 3, 1, 2), (3, 2)]),
    "rnn-stack": (recurrent, [(2, 3, 4), (4, 4)]),
    "masked-fill": (masked, [(2, 3, 4), (3, 1), (1,)]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_pytorch(name: str, backend: str) -> None:
    """Against PyTorch in float64: the movement cases are off by at most 2.3e-7 relative
    (the float32 roundings of their few products and sums), the RNN's tanh chain by 6e-7
    absolute, on both backends; the tolerances keep a 4x and 8x margin."""
    fn, shapes = CASES[name]
    got, want = run_both(fn, shapes, backend, torch.float64)
    assert len(got) == len(want)
    rtol, atol = (0.0, 5e-6) if name == "rnn-stack" else (1e-6, 1e-7)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, i
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{name} output {i}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_fill_with_minus_inf_before_softmax(backend: str) -> None:
    """Attention's padding mask: -inf scores get probability 0 and no gradient.

    Against PyTorch in float64, float32 outputs and gradients are off by at most 4.3e-8
    (measured on both backends), so 1e-6 absolute keeps a 20x margin."""

    def attention(s: Any, keep: Any) -> Any:  # masks 0 and 3 keys of the 4 (no row all -inf)
        return s.masked_fill(keep > 0.0, float("-inf")).softmax(-1)

    got, want = run_both(attention, [(2, 3, 4), (2, 1, 4)], backend, torch.float64)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6, err_msg=str(i))


def feeder(*shape: int) -> gradfuse.Tensor:
    return Feeder(lambda: np.zeros(shape, np.float32), shape=list(shape))


def test_shapes_and_no_ops() -> None:
    x = feeder(2, 1, 3)
    assert x.squeeze(0).shape == (2, 1, 3) and x.squeeze(-2).shape == (2, 3)
    assert x.squeeze().shape == (2, 3) and x.unsqueeze(3).shape == (2, 1, 3, 1)
    assert gradfuse.cat([x]) is x and gradfuse.concat([x, x], 1).shape == (2, 2, 3)
    assert gradfuse.stack([x, x], -1).shape == (2, 1, 3, 2)
    assert feeder().squeeze(0).shape == () and feeder().unsqueeze(0).shape == (1,)
    m = feeder(3) > 0.0
    assert feeder(2, 3).masked_fill(m, 1.0).shape == (2, 3)
    assert feeder(3).masked_fill(feeder(2, 3) > 0.0, 1.0).shape == (2, 3)  # as PyTorch


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: gradfuse.cat([feeder(2, 3), feeder(3, 3)], 1),
            "cat: entry 1 has shape 3x3 and entry 0 2x3: they must agree except in dim 1",
        ),
        (lambda: gradfuse.cat([], 0), "cat: expected a non-empty list of Tensors"),
        (lambda: gradfuse.cat(feeder(2), 0), "cat: expected a list or tuple of Tensors"),
        (lambda: gradfuse.cat([feeder(2), 1.0]), "cat: entry 1 is a float, not a Tensor"),
        (lambda: gradfuse.cat([feeder(2)], 1), "cat: dim 1 is out of range for a tensor of rank 1"),
        (lambda: gradfuse.cat([feeder(), feeder()]), "cat: a 0-d tensor cannot be concatenated"),
        (
            lambda: gradfuse.stack([feeder(2, 3), feeder(2, 4)]),
            "stack: entry 1 has shape 2x4 and entry 0 2x3: stack needs equal shapes",
        ),
        (
            lambda: feeder(2, 3).unsqueeze(3),
            r"unsqueeze: dim 3 is out of range for a tensor of rank 2 \(expected -3 to 2\)",
        ),
        (lambda: feeder(2, 3).squeeze(2), "squeeze: dim 2 is out of range"),
        (
            lambda: feeder(2).masked_fill(feeder(2), 0.0),
            "masked_fill: the mask must be a boolean Tensor",
        ),
        (
            lambda: feeder(2).masked_fill(feeder(2) > 0, feeder(2)),
            "masked_fill: value must be a number or a 0-d tensor",
        ),
        (
            lambda: feeder(2).masked_fill(feeder(3) > 0, 0.0),
            "shapes cannot be broadcast together",
        ),
    ],
)
def test_errors_say_what_is_wrong_at_the_users_line(make: Fn, message: str) -> None:
    with pytest.raises(GradfuseError, match=message) as info:
        make()
    assert "test_seq_ops.py" in str(info.value)
