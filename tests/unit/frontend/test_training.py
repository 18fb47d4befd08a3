"""Recorded training loops run on the reference backend and match NumPy (and PyTorch)."""

from __future__ import annotations

import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import SGD, Linear, ReLU, Sequential, Sigmoid


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def numpy_seed_mlp(state: dict[str, np.ndarray], steps: int, lr: float) -> dict[str, np.ndarray]:
    """The seed loop in float64 NumPy: loss = sum(mlp(x)), plain SGD."""
    p = {k: v.astype(np.float64) for k, v in state.items()}
    x = np.full((2, 255), 0.2)
    for _ in range(steps):
        h = x @ p["0.weight"].T + p["0.bias"]
        s = sigmoid(h)
        dy = np.ones((2, 255))
        ds = dy @ p["2.weight"]
        dh = ds * s * (1 - s)
        grads = {
            "2.weight": dy.T @ s,
            "2.bias": dy.sum(0),
            "0.weight": dh.T @ x,
            "0.bias": dh.sum(0),
        }
        p = {k: p[k] - lr * grads[k] for k in p}
    return p


def run_seed_program(
    steps: int, dtype: type
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list]:
    """The seed program (examples/mlp.py) for `steps` steps; initial and final state, receipts."""
    nn = Sequential(Linear(255, 255), Sigmoid(), Linear(255, 255))
    rng = np.random.default_rng(1)
    initial = {
        k: rng.uniform(-0.06, 0.06, v.shape).astype(np.float32) for k, v in nn.state_dict().items()
    }
    nn.load_state_dict(initial)
    opt = SGD(nn.parameters(), lr=0.01)
    received: list = []

    def f() -> None:
        opt.zero_grad()
        val = Feeder(lambda: np.full((2, 255), 0.2, dtype=np.float32), shape=[2, 255])
        res = nn(val)
        res.backward()
        opt.step()

    ir_for(range(0, steps), f)
    Receiver(lambda *args: received.append(args), opt.parameters, name="saving params")
    execute(dtype=dtype)
    return initial, nn.state_dict(), received


def check_seed(steps: int, dtype: type = np.float64, rtol: float = 1e-5) -> None:
    initial, final, received = run_seed_program(steps, dtype)
    want = numpy_seed_mlp(initial, steps, lr=0.01)
    for key in want:
        np.testing.assert_allclose(
            final[key], want[key], rtol=rtol, atol=rtol * np.abs(want[key]).max()
        )
    assert len(received) == 1 and len(received[0]) == 4
    np.testing.assert_array_equal(received[0][0].astype(np.float32), final["0.weight"])


def test_seed_mlp_50_steps_matches_numpy_float64() -> None:
    check_seed(50)


def test_seed_mlp_50_steps_in_float32_is_close_to_numpy_float64() -> None:
    check_seed(50, np.float32, rtol=2e-5)


def test_seed_mlp_1000_steps_matches_numpy_float64() -> None:
    check_seed(1000)


def test_seed_mlp_1000_steps_in_float32_is_close_to_numpy_float64() -> None:
    check_seed(1000, np.float32, rtol=1e-4)


def test_seed_ir_has_one_loop_with_grad_and_assigns() -> None:
    nn = Sequential(Linear(4, 4), Sigmoid(), Linear(4, 4))
    opt = SGD(nn.parameters(), lr=0.01)

    def f() -> None:
        opt.zero_grad()
        nn(Feeder(lambda: np.ones((2, 4), np.float32), shape=[2, 4])).backward()
        opt.step()

    ir_for(range(0, 1000), f)
    text = gradfuse.ir_text()
    assert "tg.for %0 = 0 to 1000 step 1 {" in text
    assert text.count("tg.grad") == 1 and text.count("tg.assign") == 4
    assert text.count("tg.feeder") == 1


def test_sgd_momentum_and_weight_decay_match_numpy() -> None:
    model = Linear(3, 2)
    w0, b0 = model.weight.data.astype(np.float64), model.bias.data.astype(np.float64)  # type: ignore[union-attr]
    opt = SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)
    data = np.random.default_rng(3).normal(size=(6, 4, 3)).astype(np.float32)
    batches = iter(data)

    def step() -> None:
        opt.zero_grad()
        x = Feeder(lambda: next(batches), shape=[4, 3], name="x")
        ((model(x) - 1.0) ** 2).mean().backward()
        opt.step()

    ir_for(range(6), step)
    execute()

    w, b = w0.copy(), b0.copy()
    bw, bb = np.zeros_like(w), np.zeros_like(b)
    for x in data.astype(np.float64):
        r = x @ w.T + b - 1.0
        dy = 2 * r / r.size
        gw, gb = dy.T @ x + 0.01 * w, dy.sum(0) + 0.01 * b
        bw, bb = 0.9 * bw + gw, 0.9 * bb + gb
        w, b = w - 0.05 * bw, b - 0.05 * bb
    np.testing.assert_allclose(model.weight.data, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.bias.data, b, rtol=1e-5, atol=1e-6)  # type: ignore[union-attr]
    assert np.any(opt.state_dict()["0.momentum_buffer"] != 0)


def test_failing_feeder_keeps_params_of_the_last_finished_iteration() -> None:
    model = Linear(2, 1)
    opt = SGD(model.parameters(), lr=0.1)
    seen: list[np.ndarray] = []
    calls = iter(range(100))

    def feed() -> np.ndarray:
        if next(calls) == 3:
            raise ValueError("disk on fire")
        return np.ones((1, 2), np.float32)

    def step() -> None:
        opt.zero_grad()
        model(Feeder(feed, shape=[1, 2], name="batches")).backward()
        opt.step()
        Receiver(lambda w: seen.append(w), [model.weight], name="w")

    ir_for(range(10), step)
    with pytest.raises(GradfuseError) as info:
        execute()
    message = str(info.value)
    assert 'feeder "batches"' in message and "disk on fire" in message
    assert "iteration 3" in message
    assert "test_training.py" in message
    assert info.value.__cause__ is None
    assert len(seen) == 3
    np.testing.assert_array_equal(model.weight.data, seen[-1])


def test_feeder_with_the_wrong_shape_is_named() -> None:
    model = Linear(2, 1)
    x = Feeder(lambda: np.ones((3, 2), np.float32), shape=[1, 2], name="images")
    model(x).backward()
    with pytest.raises(GradfuseError, match='feeder "images"'):
        execute()


def test_unknown_backend_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GradfuseError, match='backend "tpu"'):
        execute(backend="tpu")
    monkeypatch.setenv("GRADFUSE_BACKEND", "nope")
    with pytest.raises(GradfuseError, match='backend "nope"'):
        execute()
    monkeypatch.setenv("GRADFUSE_BACKEND", "reference")
    model = Linear(2, 1)
    model(Feeder(np.ones((1, 2), np.float32), shape=[1, 2])).backward()
    assert execute().params.keys() == {"weight", "bias"}


def test_execute_starts_a_new_recording() -> None:
    model = Linear(2, 2)
    opt = SGD(model.parameters(), lr=0.5)
    x = Feeder(lambda: np.ones((1, 2), np.float32), shape=[1, 2])
    model(x).sum().backward()
    opt.step()
    execute()
    after_first = model.state_dict()
    assert "tg." not in gradfuse.ir_text()
    with pytest.raises(GradfuseError, match="nothing is recorded"):
        execute()  # nothing recorded since: an error, not a silent empty run
    assert all(np.array_equal(after_first[k], v) for k, v in model.state_dict().items())


def test_small_mlp_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    gradfuse.manual_seed(0)
    model = Sequential(Linear(5, 7), ReLU(), Linear(7, 3))
    state = model.state_dict()
    tmodel = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    data = np.random.default_rng(0).normal(size=(20, 4, 5)).astype(np.float32)
    batches = iter(data)
    opt = SGD(model.parameters(), lr=0.05, momentum=0.5)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.05, momentum=0.5)

    def step() -> None:
        opt.zero_grad()
        x = Feeder(lambda: next(batches), shape=[4, 5])
        (model(x).tanh() ** 2).mean().backward()
        opt.step()

    ir_for(range(20), step)
    execute()
    for x in data:
        topt.zero_grad()
        (tmodel(torch.tensor(x)).tanh() ** 2).mean().backward()
        topt.step()
    for k, v in tmodel.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[k], v.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "numpy", "c", "cuda"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_feeder_of_the_wrong_dtype_is_named_on_every_backend(backend: str, dtype: type) -> None:
    model = Linear(2, 1)
    opt = SGD(model.parameters(), lr=0.1)

    def step() -> None:
        opt.zero_grad()
        model(Feeder(lambda: np.ones((1, 2), dtype), shape=[1, 2], name="batches")).backward()
        opt.step()

    before = model.weight.data.copy()
    ir_for(range(3), step)
    with pytest.raises(GradfuseError) as info:
        execute(backend)
    message = str(info.value)
    assert (
        f'feeder "batches" (call 0): returned {np.dtype(dtype)} data, expected float32' in message
    )
    assert "iteration 0" in message and "test_training.py" in message
    np.testing.assert_array_equal(model.weight.data, before)


@pytest.mark.parametrize("backend", ["reference", "c", "cuda"])
def test_a_gradient_after_an_optimizer_step_does_not_flow_through_the_step(backend: str) -> None:
    from gradfuse import Parameter

    w0, v0 = np.array([1.0, -2.0], np.float32), np.array([0.5, 3.0], np.float32)
    w, v = Parameter(w0.copy(), name="w"), Parameter(v0.copy(), name="v")
    opt = SGD([w], lr=0.1)
    (w * v).sum().backward()  # w.grad = v, v.grad = w
    opt.step()  # w' = w - 0.1 v: a new leaf, as after PyTorch's in-place update
    (w * v).sum().backward()  # v.grad += w' (and not w' - 0.1 v through the step)
    got: list[np.ndarray] = []
    Receiver(lambda g: got.append(g), [v.grad], name="v.grad")
    execute(backend)
    np.testing.assert_allclose(got[0], w0 + (w0 - 0.1 * v0), rtol=1e-6)
