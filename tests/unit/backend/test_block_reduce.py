"""Long reductions with few outputs reduced by a whole GPU block (`block_reduce`, the
`cuda` pipeline), run on the lowered interpreter with the block's 256 threads in
lockstep, against NumPy; and their CUDA through nvcc."""

from __future__ import annotations

import numpy as np
import pytest
from compiled import needs_nvcc, nvcc_errors  # tests/unit
from xdsl.dialects import gpu

from gradfuse.backend import compile_module
from gradfuse.backend.cstyle import CUDATarget, render_kernels
from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import kernel as K
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

# a softmax over 300 columns: row max and row sum are 300-long reductions per row
SOFTMAX = """
func @main(%x: tensor<4x300xf32>) -> (tensor<4x300xf32>) {
  %p = tg.softmax %x dim=1 : tensor<4x300xf32>
  return %p
}
"""
# column sum and max over 520 rows: a lone reduction kernel, 8 outputs
COLUMNS = """
func @main(%x: tensor<520x8xf32>) -> (tensor<8xf32>) {
  %s = tg.reduce_sum %x dims=[0] : tensor<8xf32>
  %m = tg.reduce_max %x dims=[0] : tensor<8xf32>
  %r = tg.add %s, %m : tensor<8xf32>
  return %r
}
"""
RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 300)).astype(np.float32)
Y = RNG.standard_normal((520, 8)).astype(np.float32)


def marked(src: str) -> list[K.RowsOp]:
    module = parse_tg(src)
    run_pipeline(module, "kernels,kernel-block-reduce")
    return [op for op in module.walk() if isinstance(op, K.RowsOp)]


def test_runs_with_a_long_reduction_are_marked_and_lone_reductions_wrapped():
    (soft,) = marked(SOFTMAX)
    assert "gradfuse.block_reduce" in soft.attributes and len(soft.body.block.ops) == 3
    runs = marked(COLUMNS)
    assert runs and all("gradfuse.block_reduce" in r.attributes for r in runs)
    assert all(r.row_sizes == (8,) for r in runs)


def test_a_softmax_reduced_by_whole_blocks_gives_numpys_numbers():
    got = compile_module(parse_tg(SOFTMAX), "lowered", pipeline="cuda").run(args=[X]).results[0]
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-8)


def test_column_sums_and_maxima_reduced_by_whole_blocks():
    got = compile_module(parse_tg(COLUMNS), "lowered", pipeline="cuda").run(args=[Y]).results[0]
    np.testing.assert_allclose(got, Y.sum(0) + Y.max(0), rtol=1e-5, atol=1e-5)


def test_without_its_barriers_the_tree_races():
    module = parse_tg(COLUMNS)
    run_pipeline(module, "cuda")
    for op in [op for op in module.walk() if isinstance(op, gpu.BarrierOp)]:
        op.detach()
        op.erase()
    with pytest.raises(GradfuseError, match="race on element"):
        run_lowered(module, args=[Y])


@needs_nvcc
def test_the_block_reductions_compile_with_nvcc():
    module = parse_tg(SOFTMAX)
    run_pipeline(module, "cuda")
    source = render_kernels(module, CUDATarget())
    assert source.count("__shared__ float") == 2  # the partial maxima, the partial sums
    assert nvcc_errors(source) is None


def test_buffers_that_threads_pass_values_through_are_not_restrict():
    """The row maxima and sums: thread 0 stores them, every thread loads them after a
    __syncthreads(). Declared `__restrict__`, nvcc loaded them through the read-only cache
    (LDG.E.CONSTANT) and an H200 computed the softmax from stale values; the input, only
    loaded, and the output, only stored, keep `__restrict__`."""
    module = parse_tg(SOFTMAX)
    run_pipeline(module, "cuda")
    (head,) = [ln for ln in render_kernels(module, CUDATarget()).splitlines() if "__global__" in ln]
    params = head.split("(", 1)[1].rsplit(")", 1)[0].split(", ")
    assert params == [
        "float* __restrict__ v0", "float* v1", "float* v2", "float* v3", "float* __restrict__ v4",
    ]  # fmt: skip
