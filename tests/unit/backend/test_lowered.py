"""The lowered-IR interpreter runs `convert-kernel-to-gpu` output as NumPy says it should."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_programs import (
    B4,
    F3,
    ID1,
    PROGRAMS,
    kernel,
    load,
    lower,
    main,
    parse,
    store,
    unary,
)

from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.diagnostics import GradfuseError


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_lowered_program_matches_numpy(name: str) -> None:
    prog = PROGRAMS[name]
    result = run_lowered(lower(prog.module()), feeders=prog.feeders, params=prog.params)
    prog.check(result)


def test_params_seed_from_given_values_and_are_not_mutated() -> None:
    prog = PROGRAMS["sgd_loop"]
    w0 = np.array([1.0, 2.0, 3.0], np.float32)
    result = run_lowered(lower(prog.module()), feeders=prog.feeders, params={"w": w0})
    np.testing.assert_allclose(result.params["w"], w0 - 0.1 * prog.feeders["g"].sum(0), rtol=1e-6)
    np.testing.assert_array_equal(w0, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(result.results[0], result.params["w"])


def test_receivers_get_arrays_and_feeders_may_be_callables() -> None:
    prog = PROGRAMS["chain"]
    got: list[np.ndarray] = []
    calls = iter([np.ones(3, np.float32), np.full(3, 2.0, np.float32)])
    run_lowered(
        lower(prog.module()), feeders={"x3": lambda: next(calls)}, receivers={"chain": got.append}
    )
    np.testing.assert_allclose(got, [np.full(3, -4.0), np.full(3, -16.0)])


def test_param_without_value_or_init_is_an_error() -> None:
    prog = PROGRAMS["elementwise"]
    with pytest.raises(GradfuseError, match='param "b" has no initial value'):
        run_lowered(lower(prog.module()), feeders=prog.feeders)


def test_missing_feeder_is_an_error() -> None:
    prog = PROGRAMS["reduce"]
    with pytest.raises(GradfuseError, match='feeder "x"'):
        run_lowered(lower(prog.module()), params=prog.params)


def test_out_of_bounds_access_is_caught() -> None:
    text = main(
        f'  %x = kernel.alloc : {B4}\n  %y = kernel.alloc : {B4}\n  kernel.feed "x", %x : {B4}\n'
        + kernel(
            "shift", "elementwise", [4], 1, [("%x", B4), ("%y", B4)],
            load("%a", "%b0", "affine_map<(d0) -> (d0 + 1)>", B4) + store("%a", "%b1", ID1, B4),
        )
        + "  func.return"
    )  # fmt: skip
    with pytest.raises(GradfuseError, match=r"index \[4\] is outside a buffer of shape \[4\]"):
        run_lowered(lower(parse(text)), feeders={"x": np.zeros(4, np.float32)})


def test_reading_a_temporary_before_any_write_gives_nan() -> None:
    text = main(f"  %t = kernel.alloc : {F3}\n  %u = kernel.alloc : {F3}\n")
    text = text.replace(
        "\n}",
        unary("copy", "%t", "%u", "arith.addf %a, %a") + '  kernel.receive "u", %u : '
        f"{F3}\n  func.return\n}}",
    )
    out = run_lowered(lower(parse(text))).received["u"][0][0]
    assert np.isnan(out).all()


def test_threads_that_race_are_an_error() -> None:
    """A transpose in place: thread (i, j) writes what thread (j, i) reads."""
    ty, idx = "memref<2x2xf32>", "affine_map<(d0, d1) -> (d0, d1)>"
    text = main(
        f'  %x = kernel.alloc : {ty}\n  kernel.feed "x", %x : {ty}\n'
        + kernel(
            "transpose", "elementwise", [2, 2], 2, [("%x", ty)],
            load("%a", "%b0", "affine_map<(d0, d1) -> (d1, d0)>", ty) + store("%a", "%b0", idx, ty),
        )
        + "  func.return"
    )  # fmt: skip
    with pytest.raises(GradfuseError, match="kernel transpose: threads 1 and 2 race on element"):
        run_lowered(lower(parse(text)), feeders={"x": np.eye(2, dtype=np.float32)})
