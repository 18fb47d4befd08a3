"""BCEWithLogitsLoss / F.binary_cross_entropy_with_logits and nn.utils.clip_grad_norm_
against PyTorch in float64, on the reference interpreter and the c backend.

Tolerances come from float64 runs: see each test's docstring for what was measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradfuse
import gradfuse.nn as gnn
from gradfuse import Feeder, Parameter, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.nn import functional as F

torch = pytest.importorskip("torch")

BACKENDS = ["reference", "c", "cuda"]
# logits with an exact 0 (where |x| has a kink) and saturating ones (exp(100) overflows)
LOGITS = np.array([[0.0, 1.5, -2.0, 100.0], [-100.0, 0.3, -0.7, 30.0]], np.float32)
TARGETS = np.array([[1.0, 0.0, 0.25, 0.0], [1.0, 1.0, 0.0, 0.5]], np.float32)
ARGS: dict[str, dict[str, Any]] = {
    "mean": {},
    "sum-pos-weight": {"reduction": "sum", "pos_weight": np.array([3.0, 0.5, 1.0, 2.0])},
    "none-both-weights": {
        "reduction": "none",
        "weight": np.array([[2.0], [0.5]]),
        "pos_weight": np.array([1.5, 1.0, 4.0, 0.2]),
    },
    "legacy-size-average": {"size_average": False},
}


@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(ARGS))
def test_bce_with_logits_matches_pytorch(name: str, backend: str) -> None:
    """The loss and its gradients wrt the logits and the targets. Against PyTorch in
    float64 the float32 results are off by at most 1.1e-7 relative (measured on both
    backends): 1e-6 keeps a margin of 9; the loss at x = +-100 is finite, and the gradient
    at x = 0 is sigmoid's (PyTorch's), not a subgradient of |x|."""
    kw = ARGS[name]
    x, y = Parameter(LOGITS, name="x"), Parameter(TARGETS, name="y")
    ours = {k: gradfuse.constant(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    loss = F.binary_cross_entropy_with_logits(x, y, **ours)
    loss.sum().backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [loss, x.grad, y.grad], name="got")  # type: ignore[list-item]
    execute(backend=backend)
    xt = torch.tensor(LOGITS, dtype=torch.float64, requires_grad=True)
    yt = torch.tensor(TARGETS, dtype=torch.float64, requires_grad=True)
    theirs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    want = torch.nn.functional.binary_cross_entropy_with_logits(xt, yt, **theirs)
    want.sum().backward()
    for what, g, w in zip(["loss", "x grad", "y grad"], got, [want, xt.grad, yt.grad]):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-6, atol=1e-7, err_msg=what)


def test_bce_with_logits_module_keeps_weights_as_pytorchs_buffers() -> None:
    pw = torch.tensor([3.0, 1.0, 1.0, 2.0])
    ours = gnn.BCEWithLogitsLoss(pos_weight=pw)
    theirs = torch.nn.BCEWithLogitsLoss(pos_weight=pw)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["pos_weight"]
    assert ours.parameters() == [] and len(ours.buffers()) == 1
    got: list[np.ndarray] = []
    Receiver(got.append, ours(gradfuse.constant(LOGITS), gradfuse.constant(TARGETS)))
    execute(backend="reference")
    want = theirs(torch.tensor(LOGITS), torch.tensor(TARGETS))
    np.testing.assert_allclose(got[0], want.numpy(), rtol=1e-6)


def test_bce_with_logits_errors() -> None:
    x, y = gradfuse.constant(LOGITS), gradfuse.constant(TARGETS)
    with pytest.raises(GradfuseError, match="input 2x4 and target 4 differ in shape") as info:
        F.binary_cross_entropy_with_logits(x, y[0])
    assert "test_logits_loss_and_clipping.py" in str(info.value)
    with pytest.raises(GradfuseError, match="pos_weight 3 does not broadcast to the input 2x4"):
        F.binary_cross_entropy_with_logits(x, y, pos_weight=np.ones(3))
    with pytest.raises(GradfuseError, match="weight 2x2x4 does not broadcast to the input 2x4"):
        F.binary_cross_entropy_with_logits(x, y, weight=np.ones((2, 2, 4)))
    with pytest.raises(GradfuseError, match="reduction must be one of"):
        F.binary_cross_entropy_with_logits(x, y, reduction="avg")


def clipped_training(
    backend: str | None, max_norm: float, norm_type: float
) -> tuple[list[float], list[np.ndarray]]:
    """3 SGD steps on a 2-layer MLP with the gradients clipped before each step; the total
    norms clip_grad_norm_ returned and the final parameters, from gradfuse (float32) or
    with `backend=None` from PyTorch (float64)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    t = (5.0 * rng.normal(size=(4, 2))).astype(np.float32)  # large errors: large gradients
    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    if backend is None:
        tmodel = tmodel.double()
        opt = torch.optim.SGD(tmodel.parameters(), lr=0.1)
        norms = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(
                tmodel(torch.tensor(x).double()), torch.tensor(t).double()
            )
            loss.backward()
            norms.append(
                float(torch.nn.utils.clip_grad_norm_(tmodel.parameters(), max_norm, norm_type))
            )
            opt.step()
        return norms, [p.detach().numpy() for p in tmodel.parameters()]
    model = gnn.Sequential(gnn.Linear(3, 5), gnn.Tanh(), gnn.Linear(5, 2))
    model.load_state_dict(tmodel.state_dict())
    sgd = gnn.SGD(model.parameters(), lr=0.1)
    got: list[float] = []

    def step() -> None:
        sgd.zero_grad()
        out = model(Feeder(lambda: x, shape=x.shape, name="x"))
        gnn.MSELoss()(out, Feeder(lambda: t, shape=t.shape, name="t")).backward()
        total = gnn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=norm_type)
        Receiver(lambda v: got.append(float(v)), total, name="norm")
        sgd.step()

    ir_for(range(3), step)
    execute(backend=backend)
    return got, [p.data for p in model.parameters()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("max_norm", "norm_type"), [(0.25, 2.0), (0.5, float("inf")), (1.0, 1), (1e3, 2.0)]
)
def test_clip_grad_norm_matches_pytorch(backend: str, max_norm: float, norm_type: float) -> None:
    """Clipped (and, with max_norm 1e3, unclipped) SGD steps: against PyTorch in float64
    the norms are off by at most 1.3e-7 relative and the parameters by 6.8e-8 absolute
    (measured on both backends): 1e-6 relative and 5e-7 absolute keep a margin of 7."""
    norms, params = clipped_training(backend, max_norm, norm_type)
    want_norms, want_params = clipped_training(None, max_norm, norm_type)
    np.testing.assert_allclose(norms, want_norms, rtol=1e-6)
    if max_norm < 1e3:
        assert min(want_norms) > max_norm  # every step was clipped
    for g, w in zip(params, want_params):
        np.testing.assert_allclose(g, w, rtol=0, atol=5e-7)


def test_clip_grad_norm_is_torchs_api() -> None:
    from gradfuse.nn.utils import clip_grad_norm_

    assert clip_grad_norm_ is gnn.utils.clip_grad_norm_
    w = Parameter(np.ones(3, np.float32), name="w")
    assert clip_grad_norm_([w], 1.0).shape == ()  # no gradient yet: a norm of 0
    (w * 2.0).sum().backward()
    assert clip_grad_norm_(w, 1.0, foreach=True).shape == ()
    with pytest.raises(GradfuseError, match="norm_type must be positive or inf"):
        clip_grad_norm_(w, 1.0, norm_type=0)
    with pytest.raises(GradfuseError, match="error_if_nonfinite=True is not supported"):
        clip_grad_norm_(w, 1.0, error_if_nonfinite=True)
