"""DCGAN and ResNet-18 training steps at small sizes and recurrent layers trained through
their loops on a CUDA device (tests/gpu/conftest.py), and the runtime's asynchronous
paths against its synchronous one.

The models: every param, buffer and loss after a step drifts from the reference
interpreter's float64 run at most 4 times as far as the reference's own float32 runs
do (`float32_drift`; from the params and from params nudged by one ulp). A multiple
of float32's own drift, not a fixed tolerance, since the kernels sum in another order
than NumPy does (tiles, block reductions) and nvcc contracts multiply-adds to FMAs.

The runtime: the seed MLP with a feeder and a receiver, its loop body captured as a
graph and replayed, copies and launches queued on a stream that runs on its own thread,
gives bitwise the params and received values of the emulated device with
CUDA_LAUNCH_BLOCKING=1, where every copy and launch runs when it is issued, on the
caller's thread (same kernels, same order).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from device_under_test import BACKEND_MARKS, ON

import gradfuse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "frontend"))
from example_programs import load_example, record_mlp  # noqa: E402
from float32_drift import Drift, assert_within, drift, nudge, table  # noqa: E402

pytestmark = BACKEND_MARKS

SIZES = {
    "dcgan": {"BATCH": 2, "NGF": 8, "NDF": 8},
    "resnet18": {"BATCH": 2, "IMAGE": 32, "NUM_CLASSES": 10},
}
NUDGES = (1, 2)
"""Seeds of the nudged float32 runs (`float32_drift.nudge`) that scale float32's drift."""
ADAM_RESOLVES = 0.99
"""Adam's first step moves an element by lr |g| / (|g| + 1e-8): by over 0.99 lr where
|g| > 1e-6. Below, the gradient's float32 rounding decides the move (the DCGAN tests of
tests/unit leave those elements out the same way); the float64 run's move tells them."""


def state_of(models: list[Any], losses: Any) -> dict[str, np.ndarray]:
    state = {"losses": np.asarray(losses, np.float64)}
    for k, model in enumerate(models):
        state.update({f"{k}.{key}": np.array(v) for key, v in model.state_dict().items()})
    return state


def one_step(
    name: str, backend: str, dtype: Any = None, nudged: int | None = None, **sizes: int
) -> tuple[dict, dict]:
    """The example's state before one training step on `backend`, and after it (with
    the losses); `sizes` replace `SIZES[name]`'s; with `nudged`, each param first moves
    by one ulp (`float32_drift.nudge`, one generator of that seed for them all)."""
    gradfuse.reset()
    example = load_example(name, **{**SIZES[name], **sizes})
    *models, losses = example.record(1, log_every=1)
    if nudged is not None:
        rng = np.random.default_rng(nudged)
        for param in (p for model in models for p in model.parameters()):
            param.data = nudge(param.data, rng)
    before = state_of(models, [])
    gradfuse.compile(backend, dtype=dtype).run()
    return before, state_of(models, losses)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_a_training_step_drifts_as_the_reference_float32_does(name: str) -> None:
    """DCGAN's Adam moves are compared where Adam resolves the gradient (`ADAM_RESOLVES`).
    Float32's drift is the largest of three reference float32 runs: from the params and
    from the params nudged by one ulp (`NUDGES`), as one run's drift of an ill-conditioned
    scalar is a poor scale. Measured: ResNet-18's loss drifts 8.6e-5 in the plain run and
    7.2e-5, 4.8e-4, 6.4e-4 from nudged params (seeds 1-3); an H200 with nvcc's FMA
    contraction 4.0e-4 (4.7 times the plain run's; 1.5 with --fmad=false), the emulated
    device 1.6 times at most (3.4 on DCGAN G's first weight with the unresolved elements in)."""
    _, ours = one_step(name, ON)
    before, ref64 = one_step(name, "reference", dtype=np.float64)
    runs32 = [one_step(name, "reference", nudged=seed)[1] for seed in (None, *NUDGES)]
    resolved = ADAM_RESOLVES * load_example(name).LR
    rows = []
    for key, want in ref64.items():
        mask = None
        if name == "dcgan" and key.endswith(("weight", "bias")):
            mask = np.abs(want - before[key]) > resolved
        worst32 = max(runs32, key=lambda run: drift(run[key], want, mask))
        rows.append(Drift(key, ours[key], worst32[key], want, mask))
    print(table(rows))
    assert_within(rows, factor=4)


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="found 2026-11-24, not yet explained: at 64x64 and batch 2 the cuda pipeline's"
    " step gives layer3's BN biases gradients 1.6e-2 (relative) off the reference's float64,"
    " where the reference's float32 is 7.5e-6 off and c 1.1e-5; the same in fibers and"
    " threads mode, with one OS thread or two, so the CUDA text computes it",
)
def test_resnet18_at_64x64_drifts_as_the_reference_float32_does() -> None:
    _, ours = one_step("resnet18", ON, IMAGE=64)
    _, ref32 = one_step("resnet18", "reference", IMAGE=64)
    _, ref64 = one_step("resnet18", "reference", dtype=np.float64, IMAGE=64)
    rows = [Drift(key, ours[key], ref32[key], want) for key, want in ref64.items()]
    print(table(rows))
    assert_within(rows, factor=4)


@pytest.mark.parametrize("name", ["lstm-2-bi-batch_first", "gru-2", "lstmcell-steps"])
def test_recurrent_layers_train_as_pytorchs(name: str) -> None:
    """tests/unit/frontend/test_recurrent.py's training check (20 SGD steps from PyTorch's
    state_dict, params to 1e-4 of PyTorch's) on the device: the loops of the layers, their
    reverse loops and stacks."""
    recurrent = pytest.importorskip("test_recurrent", reason="needs torch")
    recurrent.test_training_matches_pytorch(name, ON)


@pytest.mark.skipif(ON != "cuda-emu", reason="compares two modes of the emulated device")
def test_streams_and_graph_replay_give_the_synchronous_paths_results(monkeypatch) -> None:
    runs = []
    for blocking in ("0", "1"):
        monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", blocking)
        _, received = record_mlp(16, 2, 6)
        result = gradfuse.compile(ON).run()
        runs.append((result.params, [np.array(a) for call in received for a in call]))
    (params, received), (want_params, want_received) = runs
    assert params.keys() == want_params.keys() and len(received) == len(want_received) > 0
    for key in want_params:
        assert np.array_equal(params[key], want_params[key]), key
    for got, want in zip(received, want_received):
        assert np.array_equal(got, want)
