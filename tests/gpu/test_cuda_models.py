"""DCGAN and ResNet-18 training steps at small sizes and recurrent layers trained through
their loops on a CUDA device (tests/gpu/conftest.py), and the runtime's asynchronous
paths against its synchronous one.

The models: every param, buffer and loss after the steps drifts from the reference
interpreter's float64 run at most 4 times as far as the reference's own float32 run
does (`float32_drift`; measured on the emulated device: at most 1.6 times). A
multiple of float32's own drift, not a fixed tolerance, since the kernels sum in
another order than NumPy does (tiles, block reductions).

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
from float32_drift import Drift, assert_within, table  # noqa: E402

pytestmark = BACKEND_MARKS

SIZES = {
    "dcgan": {"BATCH": 2, "NGF": 8, "NDF": 8},
    "resnet18": {"BATCH": 2, "IMAGE": 32, "NUM_CLASSES": 10},
}


def one_step(name: str, backend: str, dtype: Any = None) -> dict[str, np.ndarray]:
    """The example's state and losses after one training step on `backend`."""
    gradfuse.reset()
    example = load_example(name, **SIZES[name])
    *models, losses = example.record(1, log_every=1)
    gradfuse.compile(backend, dtype=dtype).run()
    state = {"losses": np.asarray(losses, np.float64)}
    for k, model in enumerate(models):
        state.update({f"{k}.{key}": np.asarray(v) for key, v in model.state_dict().items()})
    return state


@pytest.mark.parametrize("name", sorted(SIZES))
def test_a_training_step_drifts_as_the_reference_float32_does(name: str) -> None:
    ours = one_step(name, ON)
    ref32 = one_step(name, "reference")
    ref64 = one_step(name, "reference", dtype=np.float64)
    rows = [Drift(key, ours[key], ref32[key], ref64[key]) for key in ref64]
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
