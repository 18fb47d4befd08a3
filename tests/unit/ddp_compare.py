"""What the data-parallel tests compare (test_distributed.py, test_torchrun.py): the
params that each rank of a run of tests/unit/ddp_train.py saved, and those of one
process trained on the whole batch (`ddp_train.py MODEL BACKEND single OUT`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

TRAIN = Path(__file__).resolve().parent / "ddp_train.py"


def ranks_and_one_process(
    out: Path, model: str, backend: str, mode: str = "ddp"
) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """The two ranks' saved params (`OUT/<mode>_<rank>.npz`) and one process's, trained
    now, each rank's bitwise equal to the other's (every rank adds the same all-reduced
    gradients in the same order)."""
    single = subprocess.run(
        [sys.executable, str(TRAIN), model, backend, "single", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert single.returncode == 0, single.stderr
    ranks = [dict(np.load(out / f"{mode}_{r}.npz")) for r in (0, 1)]
    alone = dict(np.load(out / "single_0.npz"))
    assert sorted(ranks[0]) == sorted(alone) == sorted(ranks[1])
    for key in alone:
        assert np.array_equal(ranks[0][key], ranks[1][key]), key
    return ranks, alone


def assert_ranks_train_as_one_process(
    out: Path, model: str, backend: str, mode: str = "ddp"
) -> None:
    """Rank 0's params within rtol 1e-5 and atol 1e-7 of one process's (the tolerance
    test_distributed.py argues from a float64 run), and the ranks' bitwise equal."""
    ranks, alone = ranks_and_one_process(out, model, backend, mode)
    assert len(alone) >= 4
    for key in alone:
        np.testing.assert_allclose(ranks[0][key], alone[key], rtol=1e-5, atol=1e-7, err_msg=key)
