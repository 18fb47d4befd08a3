"""TransformerEncoderLayer: forward and training against float64 NumPy and PyTorch.

d_model=16, nhead=2, dim_feedforward=32, dropout=0, batch_first=True, both
`norm_first`, relu and gelu; MSE against a random target so no gradient is
degenerate, except the key slice of `in_proj_bias` (softmax is shift-invariant:
its gradient is exactly zero, rounding noise decides it, Adam amplifies that
noise), which is left out of the Adam comparisons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numpy_nn import NumpyAdam, V, encoder_layer, mse, sgd_step

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import (
    SGD,
    Adam,
    LayerNorm,
    MSELoss,
    TransformerEncoder,
    TransformerEncoderLayer,
)

E, H, FF, N, L = 16, 2, 32, 2, 5
CONFIGS = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]
IDS = [f"{'pre' if nf else 'post'}-{act}" for nf, act in CONFIGS]
KEY_BIAS = "self_attn.in_proj_bias"

Data = tuple[np.ndarray, np.ndarray]


def data(seed: int = 0) -> Data:
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(N, L, E)).astype(np.float32),
        rng.normal(size=(N, L, E)).astype(np.float32),
    )


def make_layer(norm_first: bool, activation: str) -> TransformerEncoderLayer:
    """A layer whose every parameter (biases and LayerNorm too) is random and non-trivial."""
    layer = TransformerEncoderLayer(
        E, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    rng = np.random.default_rng(1)
    state = {k: v + rng.normal(0.0, 0.1, v.shape) for k, v in layer.state_dict().items()}
    layer.load_state_dict(state)
    return layer


def run_gradfuse(
    layer: TransformerEncoderLayer,
    make_opt: Callable[[list], Any],
    steps: int,
    xy: Data,
    **run: Any,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The output of the initial layer on x, and the state after `steps` MSE steps."""
    x, target = xy
    opt = make_opt(layer.parameters())
    out: list[np.ndarray] = []
    Receiver(out.append, layer(Feeder(lambda: x, shape=[N, L, E], name="x0")), name="y")

    def step() -> None:
        opt.zero_grad()
        xs = Feeder(lambda: x, shape=[N, L, E], name="x")
        ts = Feeder(lambda: target, shape=[N, L, E], name="target")
        MSELoss()(layer(xs), ts).backward()
        opt.step()

    ir_for(range(steps), step)
    names = [name for name, _ in layer.named_parameters()]
    final: list[np.ndarray] = []
    Receiver(lambda *values: final.extend(values), layer.parameters, name="final")
    execute(**run)
    return out[0], dict(zip(names, final))  # in the precision of the run (not the model's f32)


def run_numpy(
    state: dict[str, np.ndarray],
    norm_first: bool,
    activation: str,
    steps: int,
    xy: Data,
    update: Callable[[dict, dict], None],
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    x, target = xy
    p = {k: v.astype(np.float64) for k, v in state.items()}

    def forward(params: dict[str, V]) -> V:
        return encoder_layer(params, V(x), H, activation, norm_first)

    y0 = forward({k: V(v) for k, v in p.items()}).value
    for _ in range(steps):
        vs = {k: V(v) for k, v in p.items()}
        mse(forward(vs), target).backward()
        update(p, {k: v.grad for k, v in vs.items()})
    return y0, p


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str = "") -> None:
    """Elementwise within `rtol` of the largest magnitude of `want`."""
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(got - want).max()) / scale
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol}"


def compare_states(got: dict, want: dict, rtol: float, skip_key_bias: bool) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        g, w = np.asarray(got[k], np.float64), np.asarray(want[k], np.float64)
        if skip_key_bias and k == KEY_BIAS:
            g, w = np.delete(g, np.s_[E : 2 * E]), np.delete(w, np.s_[E : 2 * E])
        assert_close(g, w, rtol, k)


NUMPY_CASES = {
    "sgd": (5, lambda ps: SGD(ps, lr=0.05), lambda: lambda p, g: sgd_step(p, g, 0.05)),
    "adam": (3, lambda ps: Adam(ps, lr=1e-2), lambda: NumpyAdam(1e-2).step),
}


@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=IDS)
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_encoder_layer_matches_numpy(
    norm_first: bool, activation: str, opt: str, precision: str
) -> None:
    steps, make_opt, make_update = NUMPY_CASES[opt]
    layer = make_layer(norm_first, activation)
    state, xy = layer.state_dict(), data()
    if precision == "float64":
        run: dict[str, Any] = {"backend": "reference", "dtype": np.float64}
        rtol = {"sgd": 1e-9, "adam": 1e-7}[opt]
    else:
        run, rtol = {"backend": "numpy"}, {"sgd": 1e-5, "adam": 1e-3}[opt]
    y0, final = run_gradfuse(layer, make_opt, steps, xy, **run)
    want_y0, want = run_numpy(state, norm_first, activation, steps, xy, make_update())
    assert_close(y0, want_y0, 1e-12 if precision == "float64" else 1e-5, "forward")
    compare_states(final, want, rtol, skip_key_bias=opt == "adam")


def torch_layer(torch: Any, norm_first: bool, activation: str) -> Any:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(
        E, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )


TORCH_CASES = {"sgd": (100, 1e-4), "adam": (20, 1e-3)}


@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=IDS)
def test_encoder_layer_matches_pytorch(norm_first: bool, activation: str, opt: str) -> None:
    torch = pytest.importorskip("torch")
    steps, rtol = TORCH_CASES[opt]
    tlayer = torch_layer(torch, norm_first, activation)
    layer = TransformerEncoderLayer(
        E, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    layer.load_state_dict(tlayer.state_dict())
    x, target = xy = data()
    if opt == "sgd":
        topt = torch.optim.SGD(tlayer.parameters(), lr=0.05)
        y0, final = run_gradfuse(layer, lambda ps: SGD(ps, lr=0.05), steps, xy)
    else:
        topt = torch.optim.Adam(tlayer.parameters(), lr=1e-2)
        y0, final = run_gradfuse(layer, lambda ps: Adam(ps, lr=1e-2), steps, xy)
    assert_close(y0, tlayer(torch.tensor(x)).detach().numpy(), 1e-5, "forward")
    for _ in range(steps):
        topt.zero_grad()
        torch.nn.functional.mse_loss(tlayer(torch.tensor(x)), torch.tensor(target)).backward()
        topt.step()
    want = {k: v.numpy() for k, v in tlayer.state_dict().items()}
    compare_states(final, want, rtol, skip_key_bias=True)


def test_state_dict_names_are_pytorchs() -> None:
    layer = TransformerEncoderLayer(E, H, FF)
    assert list(layer.state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
        "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
        "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
    ]  # fmt: skip
    state = layer.state_dict()
    assert state["self_attn.in_proj_weight"].shape == (3 * E, E)
    assert state["linear1.weight"].shape == (FF, E)
    assert not state["self_attn.in_proj_bias"].any() and not state["self_attn.out_proj.bias"].any()
    assert (state["norm1.weight"] == 1).all() and not state["norm2.bias"].any()


def test_encoder_layers_are_independent_deep_copies() -> None:
    layer = TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True)
    encoder = TransformerEncoder(layer, num_layers=2, norm=LayerNorm(E))
    names = list(encoder.state_dict())
    assert names[0] == "layers.0.self_attn.in_proj_weight"
    assert "layers.1.norm2.bias" in names and names[-2:] == ["norm.weight", "norm.bias"]
    first, second = encoder.layers[0], encoder.layers[1]
    assert first.linear1.weight is not second.linear1.weight  # type: ignore[union-attr]
    np.testing.assert_array_equal(first.linear1.weight.data, second.linear1.weight.data)  # type: ignore[union-attr]
    encoder(Feeder(lambda: np.zeros((N, L, E), np.float32), shape=[N, L, E]))
    text = gradfuse.ir_text()
    assert 'tg.param "layers.1.linear2.weight"' in text and 'tg.param "norm.bias"' in text


def test_encoder_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tl = torch.nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=False)
    tenc = torch.nn.TransformerEncoder(
        tl, 2, norm=torch.nn.LayerNorm(E), enable_nested_tensor=False
    )
    enc = TransformerEncoder(TransformerEncoderLayer(E, H, FF, dropout=0.0), 2, norm=LayerNorm(E))
    enc.load_state_dict(tenc.state_dict())
    x = np.random.default_rng(2).normal(size=(L, N, E)).astype(np.float32)
    out: list[np.ndarray] = []
    Receiver(out.append, enc(Feeder(lambda: x, shape=[L, N, E])))
    execute(backend="reference")
    assert_close(out[0], tenc(torch.tensor(x)).detach().numpy(), 1e-5, "encoder")


def test_wrong_d_model_and_rank_are_errors_at_the_users_line() -> None:
    with pytest.raises(GradfuseError, match="multiple of num_heads 3") as info:
        TransformerEncoderLayer(16, 3)
    assert "test_transformer.py" in str(info.value)
    layer = TransformerEncoderLayer(E, H, FF, batch_first=True)
    with pytest.raises(GradfuseError, match=r"expected an input of shape \[L, 16\]") as info:
        layer(Feeder(lambda: np.zeros((N, L, 8), np.float32), shape=[N, L, 8]))
    assert "test_transformer.py" in str(info.value)
    with pytest.raises(GradfuseError, match="activation"):
        TransformerEncoderLayer(E, H, activation="swish")
