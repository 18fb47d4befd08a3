"""Row-by-row launches (`kernel.rows`): the same numbers on every backend, barriers that
the lowered interpreter checks, and the C and CUDA sources of them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from compiled import needs_nvcc, nvcc_errors  # tests/unit
from xdsl.dialects import gpu

from gradfuse.backend import compile_module
from gradfuse.backend.c.host import render_c
from gradfuse.backend.cstyle import CUDATarget, render_kernels
from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.backend.interpreters.tg import run
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import kernel as K
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline
from gradfuse.passes.tg.autodiff import TgAutodiffPass
from gradfuse.stats import kernel_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
from _gradcheck import apply, build, matrix_rnn, random_inputs  # noqa: E402

# softmax over the last dim, then a LayerNorm (no affine) of it: two row-wise chains
# over rows (2, 3), then a column sum over other rows, which ends the run
SOFTMAX_NORM = """
func @main(%x: tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>) {
  %p = tg.softmax %x dim=2 : tensor<2x3x8xf32>
  %m = tg.reduce_mean %p dims=[2] : tensor<2x3xf32>
  %mb = tg.view %m map=affine_map<(d0, d1, d2) -> (d0, d1)> : tensor<2x3x8xf32>
  %d = tg.sub %p, %mb : tensor<2x3x8xf32>
  %sq = tg.mul %d, %d : tensor<2x3x8xf32>
  %v = tg.reduce_mean %sq dims=[2] : tensor<2x3xf32>
  %e = tg.constant 1.0e-05 : tensor<2x3xf32>
  %ve = tg.add %v, %e : tensor<2x3xf32>
  %s = tg.sqrt %ve : tensor<2x3xf32>
  %r = tg.recip %s : tensor<2x3xf32>
  %rb = tg.view %r map=affine_map<(d0, d1, d2) -> (d0, d1)> : tensor<2x3x8xf32>
  %y = tg.mul %d, %rb : tensor<2x3x8xf32>
  %c = tg.reduce_sum %y dims=[0, 1] : tensor<8xf32>
  return %y, %c
}
"""
# the softmax alone: the normalising phase's 8 threads read what the row sums' thread wrote
SOFTMAX = """
func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>) {
  %p = tg.softmax %x dim=1 : tensor<4x8xf32>
  return %p
}
"""
X = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)


def numpy_result(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = x.astype(np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    d = p - p.mean(-1, keepdims=True)
    y = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5)
    return y, y.sum((0, 1))


def lowered_module(src: str = SOFTMAX_NORM):
    module = parse_tg(src)
    run_pipeline(module, "default")
    return module


def test_the_row_wise_chain_is_one_launch():
    module = parse_tg(SOFTMAX_NORM)
    run_pipeline(module, "kernels")
    rows = [op for op in module.walk() if isinstance(op, K.RowsOp)]
    # rows (2, 3) would keep 6 GPU threads busy (one a block), rows (2,) as many with
    # fewer blocks: kernel-fuse-rows takes (2,)
    assert len(rows) == 1 and rows[0].row_sizes == (2,)
    assert len(list(rows[0].body.block.ops)) == 4
    assert kernel_stats(module).kernels == 2  # the rows, then the column sum


@pytest.mark.parametrize("backend", ["reference", "numpy", "c", "lowered"])
def test_every_backend_gives_numpys_numbers(backend: str):
    got = compile_module(parse_tg(SOFTMAX_NORM), backend).run(args=[X]).results
    for a, b in zip(got, numpy_result(X), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_lowered_interpreter_runs_phases_barrier_by_barrier():
    """Several threads per block: each phase's points are spread over them, and what one
    thread wrote another reads after the barrier."""
    module = lowered_module(SOFTMAX)
    launch = next(op for op in module.walk() if isinstance(op, gpu.LaunchFuncOp))
    threads = launch.blockSizeX.owner.value.value.data  # type: ignore[attr-defined]
    assert threads == 32
    x = X.reshape(6, 8)[:4]
    (p,) = run_lowered(module, args=[x]).results
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_without_its_barriers_a_row_kernel_races():
    module = lowered_module(SOFTMAX)
    barriers = [op for op in module.walk() if isinstance(op, gpu.BarrierOp)]
    assert barriers
    for op in barriers:
        op.detach()
        op.erase()
    with pytest.raises(GradfuseError, match=r"kernel r\d+: threads 0 and 1 race on element"):
        run_lowered(module, args=[X.reshape(6, 8)[:4]])


@needs_nvcc
def test_the_cuda_source_syncs_between_phases_and_compiles():
    source = render_kernels(lowered_module(), CUDATarget())
    rows = source[source.index("void r") :]
    rows = rows[: rows.index("\n}\n")]
    assert rows.count("__syncthreads();") == 3  # between the 4 kernels of the run
    assert nvcc_errors(source) is None


# batch-norm statistics: the mean over channels, then the variance, kept as 1x3x1x1
# and reading the centred input at [n, c, h, w]: rows (the channels) on axis 1
BN_STATS = """
func @main(%x: tensor<4x3x2x2xf32>) -> (tensor<1x3x1x1xf32>, tensor<4x3x2x2xf32>) {
  %m = tg.reduce_mean %x dims=[0, 2, 3] : tensor<3xf32>
  %mb = tg.view %m map=affine_map<(d0, d1, d2, d3) -> (d1)> : tensor<4x3x2x2xf32>
  %d = tg.sub %x, %mb : tensor<4x3x2x2xf32>
  %sq = tg.mul %d, %d : tensor<4x3x2x2xf32>
  %v = tg.reduce_mean %sq dims=[0, 2, 3] : tensor<3xf32>
  %vk = tg.reshape %v : tensor<1x3x1x1xf32>
  return %vk, %d
}
"""


@pytest.mark.parametrize("backend", ["numpy", "c", "lowered"])
def test_statistics_over_channels_are_one_launch_on_every_backend(backend: str):
    module = parse_tg(BN_STATS)
    run_pipeline(module, "kernels")
    assert kernel_stats(module).kernels == 1
    x = np.random.default_rng(3).standard_normal((4, 3, 2, 2)).astype(np.float32)
    var, centred = compile_module(parse_tg(BN_STATS), backend).run(args=[x]).results
    np.testing.assert_allclose(var.reshape(3), x.var((0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(centred, x - x.mean((0, 2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


# matrix_rnn (h <- sigmoid(h @ w), 5 time steps) over 20 rows with a [24, 24] weight: each
# time step is a rows kernel whose phase sums h @ w, reading w in every row
RNN = [(20, 24), (24, 24)]


def _row_kernels(module) -> list[str]:
    """The C functions of the row-by-row kernels of a lowered module."""
    source = render_c(module)
    starts = [m.start() for m in re.finditer(r"static void r\d+\(", source)]
    return [source[i : source.index("\n}\n", i)] for i in starts]


def test_a_phase_that_sums_a_shared_weight_runs_over_all_rows_on_the_cpu():
    """Phase by phase over all rows (`loops-distribute`: the rows share each read of
    the weight), each phase a nest over the 20 rows; a row-wise chain that reads no
    shared weight stays row by row, its phases inside one loop over the rows."""
    module = build(matrix_rnn, RNN, grad=True)
    run_pipeline(module, "cpu")
    shared = _row_kernels(module)
    assert len(shared) == 2  # the forward and the reverse time step
    for text in shared:
        assert len(re.findall(r"^  for \(long d0 = 0; d0 < 20; d0\+\+\)$", text, re.M)) >= 3
    own_module = parse_tg(SOFTMAX_NORM)
    run_pipeline(own_module, "cpu")
    (own,) = _row_kernels(own_module)
    assert re.findall(r"^  for \(.*\)$", own, re.M) == ["  for (long d0 = 0; d0 < 2; d0++)"]
    assert own.count("    for (long d1 = 0; d1 < 3; d1++)") == 4  # the phases in it


@pytest.mark.c_numeric
def test_rows_run_over_all_rows_give_float64s_numbers():
    """The c backend against a float64 run of the same program (seed 3). Scaled by each
    output's largest magnitude, float32 leaves the reference within 2.9e-7 of float64 and
    the c backend (native, and -march=x86-64 -mno-fma) within 2.9e-7 too: the sums of 24
    products in another order. 2e-6 of the largest magnitude leaves 7x."""
    xs = [a.astype(np.float32) for a in random_inputs(RNN, seed=3)]
    exact = apply(build(matrix_rnn, RNN, grad=True), TgAutodiffPass())
    want = run(exact, args=[a.astype(np.float64) for a in xs], dtype=np.float64).results
    got = compile_module(build(matrix_rnn, RNN, grad=True), "c").run(args=xs).results
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 * np.abs(b).max())
