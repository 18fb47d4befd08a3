"""Random training programs (tests/unit/random_programs.py) on every CPU backend.

Each hypothesis example is a batch of programs recorded into one gradfuse program (so
one C build serves many), run on the reference interpreter in float64 and float32,
on `c` and on `lowered`, and from its printed `.tg` text. Checked:

- every backend gives each param's `.grad` its param's shape, for the same params;
- the float64 reference matches PyTorch's float64 autograd and `torch.optim.SGD`
  (losses, grads, final params) where torch is importable, and its first grads match
  central differences in float64 (unless a relu, abs, max or where is near its kink);
- each float32 run is within `BOUND` float32 errors of the float64 reference (see
  `float32_bound`).

`make test` runs a fixed sequence of 96 programs (48 of them again in `make test-portable`), `make test-slow` 1,200 others.
A failing batch is run again one program at a time, and the first failing program's
`Spec` is printed, so it can be pasted into a regression test.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from numpy_ops import numpy_grads, run_torch
from random_programs import Outcome, Spec, programs, record_all, run_gradfuse

import gradfuse
from gradfuse.backend import compile_module
from gradfuse.frontend.parser import parse_tg
from gradfuse.frontend.recorder import program

try:
    import torch
except ImportError:  # the oracle is then central differences
    torch = None

EPS32 = float(np.finfo(np.float32).eps)
BOUND = 16  # float32 errors of the float32 reference itself (see float32_bound)
BATCH = 12
# With $GRADFUSE_CFLAGS (the portable rerun of `make test`), only c is built differently.
PORTABLE = bool(os.environ.get("GRADFUSE_CFLAGS"))
BACKENDS = ("c",) if PORTABLE else ("c", "lowered")


def float32_bound(want64: np.ndarray, ref32: np.ndarray) -> float:
    """How far a float32 run may be from the float64 one.

    The float32 reference's own error measures how well this program is conditioned
    in float32; another valid evaluation (FMA, vector partial sums, a fused or
    reassociated reduction, exp2 for exp) has errors of the same order, so a backend
    may be BOUND times as far off, plus BOUND float32 roundings of the tensor's scale
    for the case where the float32 reference is exact by luck. The programs' values
    and params are of order one by construction, so the scale is at least 1.
    """
    scale = max(float(np.abs(want64).max(initial=0.0)), 1.0)
    own = float(np.abs(np.asarray(ref32, np.float64) - want64).max(initial=0.0))
    return BOUND * (own + EPS32 * scale)


def compare(got: Outcome, want: Outcome, what: str, bound: Any) -> None:
    """Same iterations, same params with grads and shapes, values within `bound`."""
    assert len(got.losses) == len(want.losses), f"{what}: iterations"
    for t, (g, w) in enumerate(zip(got.grads, want.grads)):
        assert sorted(g) == sorted(w), f"{what}: params with a .grad at step {t}"
        for i in w:
            assert g[i].shape == w[i].shape, f"{what}: p{i}.grad shape at step {t}"
            tol = bound("grad", t, i)
            assert np.abs(g[i] - w[i]).max() <= tol, f"{what}: p{i}.grad at step {t}"
    for t, (g, w) in enumerate(zip(got.losses, want.losses)):
        assert abs(g - w) <= bound("loss", t, None), f"{what}: loss at step {t}: {g} != {w}"
    for i in want.params:
        err = np.abs(got.params[i] - want.params[i]).max()
        assert err <= bound("param", None, i), f"{what}: final p{i}"


def check_differences(spec: Spec, want: Outcome) -> None:
    """The first step's float64 grads against central differences of the loss (h = 1e-6,
    error ~1e-10), unless a relu, abs, max or where is within reach of h of its kink or
    the program detaches (differences see through detach(), gradients do not)."""
    if any(step[0] == "detach" for step in spec.steps):
        return
    grads, kink = numpy_grads(spec)
    if kink > 1e-4:
        for i, g in grads.items():
            np.testing.assert_allclose(want.grads[0].get(i, 0 * g), g, rtol=1e-5, atol=1e-6)


def check_one(spec: Spec, runs: dict[str, Outcome], oracle: Outcome | None) -> None:
    want = runs["reference64"]
    if oracle is not None:  # float64 against float64: only evaluation order differs
        compare(want, oracle, "float64 reference vs torch", lambda *_: 1e-9)
    check_differences(spec, want)
    ref = runs["reference"]

    def bound(kind: str, t: int | None, i: int | None) -> float:
        if kind == "loss":
            return float32_bound(np.array(want.losses[t]), np.array(ref.losses[t]))
        if kind == "grad":
            return float32_bound(want.grads[t][i], ref.grads[t][i])
        return float32_bound(want.params[i], ref.params[i])

    for name, got in runs.items():
        if name != "reference64":
            compare(got, want, name, bound)


def run_all(specs: list[Spec], backends: tuple[str, ...]) -> dict[str, list[Outcome]]:
    runs = {"reference64": run_gradfuse(specs, "reference", dtype=np.float64)}
    runs["reference"] = run_gradfuse(specs, "reference")
    for backend in backends:
        runs[backend] = run_gradfuse(specs, backend)
    if not PORTABLE:
        runs["text"] = run_text(specs)
    return runs


def run_text(specs: list[Spec]) -> list[Outcome]:
    """The programs printed as `.tg`, parsed back, and run on the reference."""
    outs = record_all(specs)
    prog = program()
    module = parse_tg(gradfuse.ir_text(), "random.tg")
    params = {key: p.data for key, p in prog.params.items()}
    compile_module(module, "reference").run(
        feeders=prog.feeders, receivers=prog.receivers, params=params
    )
    gradfuse.reset()
    return outs


def check_batch(specs: list[Spec], backends: tuple[str, ...] = BACKENDS) -> None:
    """Runs a batch; on any failure, runs each program alone to name the one that fails."""
    try:
        runs = run_all(specs, backends)
        for k, spec in enumerate(specs):
            oracle = run_torch(spec, torch) if torch is not None else None
            check_one(spec, {name: outs[k] for name, outs in runs.items()}, oracle)
    except Exception as batch_error:
        if len(specs) == 1:
            raise
        for spec in specs:
            try:
                check_batch([spec], backends)
            except Exception as err:
                raise AssertionError(f"failing program: {spec!r}") from err
        raise AssertionError("the batch fails, but each program alone passes") from batch_error


def _settings(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,  # a fixed sequence: the same programs on every run
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@_settings(int(os.environ.get("GRADFUSE_RANDOM_BATCHES", "8")))
@given(st.lists(programs(), min_size=BATCH, max_size=BATCH))
def test_random_programs_agree_everywhere(specs: list[Spec]) -> None:
    """96 programs (8 batches) in `make test` (GRADFUSE_RANDOM_BATCHES=N for N)."""
    check_batch(specs)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@_settings(100)
@given(st.lists(programs(max_steps=7), min_size=BATCH, max_size=BATCH))
def test_more_random_programs_agree_everywhere(specs: list[Spec]) -> None:
    """1,200 other programs (100 batches), longer ones, in `make test-slow`."""
    check_batch(specs)


REGRESSIONS = [
    # a dot read through a view by a receiver and by a kernel (KeyError in kernel_body)
    Spec((1, 3, 4), [("matmul", 2), ("where",), ("matmul", 3)], iters=0, weight_decay=0.01),
    # a constant of a reduction's prologue used again in its epilogue
    Spec(
        (2,),
        [("unary", "sigmoid"), ("binary", "+", "param_bcast", 14), ("where",)],
        loss="mean",
        iters=2,
        momentum=0.9,
        seed=1297,
    ),  # fmt: skip
    # a reduction of one step packed by the C backend (IndexError in pack_render)
    Spec((4, 1, 4), [("matmul", 4)], iters=1),
    Spec(
        (2, 1),
        [("slice", "column"), ("matmul", 2), ("view", "reverse"), ("view", "swap")],
        iters=3,
        momentum=0.9,
        seed=18795,
    ),  # fmt: skip
    # the wrong gradient: x @ p0, times p1.mean(-1, keepdim=True), plus v0[::2]
    Spec(
        (4, 4),
        [("matmul", 4), ("binary", "*", "param_mean", 0), ("binary", "+", "feed_slice", 0)],
        iters=0,
        seed=3,
    ),  # fmt: skip
    # a param read only through p[:, 0]: its .grad has the param's shape
    Spec((2, 4), [("detach",), ("slice", "column")], iters=0, seed=4),
    # a param reached only through detach() gets no .grad, and weight decay skips it
    Spec(
        (1, 3, 4),
        [("binary", "*", "param", 0), ("detach",), ("unary", "log")],
        iters=2,
        momentum=0.9,
        weight_decay=0.01,
        seed=25050,
    ),  # fmt: skip
    # a domain of 3 read as d0 floordiv 2 and d0 mod 2: the C loops missed the last point
    Spec(
        (3,),
        [
            ("softmax", 2),
            ("detach",),
            ("slice", "stride"),
            ("slice", "last"),
            ("reduce", "sum", 2, True),
        ],
        loss="square",
        iters=3,
        seed=588,
    ),  # fmt: skip
    # a guarded read in a row-by-row launch whose guard fails reads element 0 for nothing:
    # the lowered interpreter took it for a race with the row that writes element 0
    Spec(
        (4, 2),
        [("unary", "sin"), ("where",), ("slice", "last"), ("view", "reverse"), ("matmul", 4)],
        loss="mean",
        iters=2,
        momentum=0.9,
        seed=10514,
    ),  # fmt: skip
    # two top-level loops that both save params for a failure (a segfault in C)
    Spec((4,), [("reduce", "mean", 3, True), ("binary", "*", "param", 0)], iters=1, seed=3834),
    Spec(
        (1, 4, 3),
        [("binary", "*", "param_bcast", 1), ("detach",), ("unary", "neg")],
        iters=3,
        seed=96,
    ),  # fmt: skip
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_programs_that_once_failed() -> None:
    """The programs the random tester found, in one batch: each failed on c or lowered
    (a compile error, a wrong gradient or result, a crash) before its fix."""
    check_batch(REGRESSIONS)
    check_batch(REGRESSIONS[:1])
