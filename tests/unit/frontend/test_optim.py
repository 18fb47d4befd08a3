"""Adam and AdamW against float64 NumPy and torch.optim; their state lives in params."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy_nn import NumpyAdam

import gradfuse
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import SGD, Adam, AdamW, Linear

STEPS = 8
CASES: dict[str, dict[str, Any]] = {
    "adam": {"lr": 0.05},
    "adam-l2": {"lr": 0.05, "weight_decay": 0.1, "betas": (0.8, 0.99)},
    "adam-amsgrad": {"lr": 0.05, "amsgrad": True},
    "adamw": {"lr": 0.05, "weight_decay": 0.1},
}


def optimizer(case: str, params: list) -> Adam:
    return (AdamW if case.startswith("adamw") else Adam)(params, **CASES[case])


def batches() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(STEPS, 4, 3)).astype(np.float32)


def train(case: str, **run: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Adam]:
    """STEPS steps of a Linear(3, 2) on (y - 1)^3-ish loss; initial and final params."""
    model = Linear(3, 2)
    initial = model.state_dict()
    opt = optimizer(case, model.parameters())
    data = iter(batches())

    def step() -> None:
        opt.zero_grad()
        x = Feeder(lambda: next(data), shape=[4, 3], name="x")
        y = model(x)
        (y * y * y + (y - 1.0) * (y - 1.0)).mean().backward()
        opt.step()

    ir_for(range(STEPS), step)
    final: list[np.ndarray] = []
    Receiver(lambda *v: final.extend(v), opt.parameters, name="final")
    execute(**run)
    return initial, dict(zip(["weight", "bias"], final)), opt


def numpy_train(case: str, initial: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    kw = CASES[case]
    ref = NumpyAdam(
        kw["lr"], kw.get("betas", (0.9, 0.999)), weight_decay=kw.get("weight_decay", 0.0),
        decoupled=case.startswith("adamw"), amsgrad=kw.get("amsgrad", False),
    )  # fmt: skip
    p = {k: v.astype(np.float64) for k, v in initial.items()}
    for x in batches().astype(np.float64):
        y = x @ p["weight"].T + p["bias"]
        dy = (3 * y * y + 2 * (y - 1.0)) / y.size
        ref.step(p, {"weight": dy.T @ x, "bias": dy.sum(0)})
    return p


@pytest.mark.parametrize("case", list(CASES))
def test_adam_matches_numpy_float64(case: str) -> None:
    initial, final, _ = train(case, backend="reference", dtype=np.float64)
    want = numpy_train(case, initial)
    for k in want:
        np.testing.assert_allclose(final[k], want[k], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_adam_in_float32_is_close_to_numpy(case: str) -> None:
    initial, final, opt = train(case)
    want = numpy_train(case, initial)
    for k in want:
        np.testing.assert_allclose(final[k], want[k], rtol=1e-4, atol=1e-5)
    state = opt.state_dict()
    assert float(state["step"]) == STEPS
    assert {"0.exp_avg", "0.exp_avg_sq", "1.exp_avg", "1.exp_avg_sq"} <= set(state)
    assert ("0.max_exp_avg_sq" in state) == ("amsgrad" in case)


@pytest.mark.parametrize("case", list(CASES))
def test_adam_matches_torch(case: str) -> None:
    torch = pytest.importorskip("torch")
    initial, final, _ = train(case)
    tmodel = torch.nn.Linear(3, 2)
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in initial.items()})
    kw = CASES[case]
    topt = (torch.optim.AdamW if case.startswith("adamw") else torch.optim.Adam)(
        tmodel.parameters(), **kw
    )
    for x in batches():
        topt.zero_grad()
        y = tmodel(torch.tensor(x))
        (y * y * y + (y - 1.0) * (y - 1.0)).mean().backward()
        topt.step()
    for k, v in tmodel.state_dict().items():
        np.testing.assert_allclose(final[k], v.numpy(), rtol=1e-4, atol=1e-5)


def test_adam_state_is_params_of_the_program() -> None:
    model = Linear(2, 2)
    opt = Adam(model.parameters())
    opt.zero_grad()
    model(Feeder(lambda: np.ones((1, 2), np.float32), shape=[1, 2])).sum().backward()
    opt.step()
    text = gradfuse.ir_text()
    for key in ("adam.step", "weight.exp_avg", "weight.exp_avg_sq", "bias.exp_avg"):
        assert f'tg.param "{key}"' in text and f'tg.assign "{key}"' in text
    assert text.count("tg.exp2") == 2  # beta1 ** t and beta2 ** t, shared by all params


def test_adamw_defaults_and_bad_arguments() -> None:
    model = Linear(2, 2)
    assert AdamW(model.parameters()).weight_decay == 1e-2
    assert Adam(model.parameters()).weight_decay == 0.0
    with pytest.raises(GradfuseError, match="betas"):
        Adam(model.parameters(), betas=(0.9, 1.0))
    with pytest.raises(GradfuseError, match="lr must be >= 0"):
        AdamW(model.parameters(), lr=-1.0)
    with pytest.raises(GradfuseError, match="empty parameter list"):
        SGD([])
