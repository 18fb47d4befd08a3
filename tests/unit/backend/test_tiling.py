"""Contractions tiled through shared memory (`kernel-tile`, the `cuda` pipeline): the
lowered interpreter runs the block's threads in lockstep between barriers, so the
tiled kernels are checked against NumPy here; nvcc compiles them."""

from __future__ import annotations

import numpy as np
import pytest
from compiled import needs_nvcc, nvcc_errors  # tests/unit
from xdsl.dialects import gpu, memref

from gradfuse.backend import compile_module
from gradfuse.backend.cstyle import CUDATarget, render_kernels
from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import kernel as K
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline
from gradfuse.passes.lib.fast_ops import is_workgroup

SMALL = "kernels,kernel-tile{tm=4 tn=4 tk=4},kernel-block-reduce,kernel-plan-buffers,convert-kernel-to-gpu"
"""Tiles of 4: 16 threads a block, so the interpreter stays quick; the shapes below
are no multiple of 4, so every tile edge is crossed."""

# a linear layer (transposed weight through its view), bias and exp2 as epilogue
LINEAR = """
func @main(%x: tensor<6x10xf32>, %w: tensor<9x10xf32>, %b: tensor<9xf32>) -> (tensor<6x9xf32>) {
  %wt = tg.view %w map=affine_map<(d0, d1) -> (d1, d0)> : tensor<10x9xf32>
  %y = tg.dot %x, %wt : tensor<6x9xf32>
  %bb = tg.view %b map=affine_map<(d0, d1) -> (d1)> : tensor<6x9xf32>
  %z = tg.add %y, %bb : tensor<6x9xf32>
  %e = tg.exp2 %z : tensor<6x9xf32>
  return %e
}
"""
# a padded, strided convolution: the input read through the im2col map and its guard
CONV = """
func @main(%x: tensor<2x3x9x9xf32>, %w: tensor<5x3x3x3xf32>) -> (tensor<2x5x5x5xf32>) {
  %y = tg.conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x5x5x5xf32>
  return %y
}
"""
RNG = np.random.default_rng(0)
X, W, B = (RNG.standard_normal(s).astype(np.float32) * 0.3 for s in [(6, 10), (9, 10), (9,)])
CX, CW = (RNG.standard_normal(s).astype(np.float32) for s in [(2, 3, 9, 9), (5, 3, 3, 3)])


def tiled(src: str, pipeline: str = SMALL):
    module = parse_tg(src)
    run_pipeline(module, pipeline)
    return module


def conv_reference() -> np.ndarray:
    padded = np.pad(CX, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((2, 5, 5, 5), np.float64)
    for i in range(5):
        for j in range(5):
            patch = padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, CW)
    return out


def test_the_cuda_pipeline_marks_contractions_with_their_tiles():
    module = parse_tg(LINEAR)
    run_pipeline(module, "kernels,kernel-tile")
    (k,) = [op for op in module.walk() if isinstance(op, K.KernelOp)]
    assert "gradfuse.tile" not in k.attributes  # 6x9 outputs: less than one 16x16 tile
    module = parse_tg(LINEAR)
    run_pipeline(module, "kernels,kernel-tile{tm=4 tn=4 tk=4}")
    (k,) = [op for op in module.walk() if isinstance(op, K.KernelOp)]
    assert list(k.attributes["gradfuse.tile"].iter_values()) == [4, 4, 4, 0, 1]


def test_a_tiled_linear_layer_gives_numpys_numbers():
    module = tiled(LINEAR)
    assert any(
        isinstance(op, memref.GetGlobalOp) and is_workgroup(op.memref.type) for op in module.walk()
    )
    (got,) = run_lowered(module, args=[X, W, B]).results
    np.testing.assert_allclose(got, np.exp2(X @ W.T + B), rtol=1e-5)


def test_a_tiled_padded_strided_convolution_gives_numpys_numbers():
    (got,) = run_lowered(tiled(CONV), args=[CX, CW]).results
    np.testing.assert_allclose(got, conv_reference(), rtol=1e-4, atol=1e-5)


def test_without_its_barriers_a_tiled_kernel_races():
    module = tiled(LINEAR)
    for op in [op for op in module.walk() if isinstance(op, gpu.BarrierOp)]:
        op.detach()
        op.erase()
    with pytest.raises(GradfuseError, match="race on element"):
        run_lowered(module, args=[X, W, B])


def test_the_lowered_backend_runs_the_cuda_pipeline_as_the_reference_does():
    """The seed MLP's training step, 3 steps, tiled as the CUDA backend tiles it (its
    255-wide contractions take 16x16x16 tiles), on the lowered interpreter."""
    pytest.importorskip("numpy")
    src = (
        "func @main(%x: tensor<16x20xf32>, %w: tensor<20x18xf32>) -> (tensor<16x18xf32>) {\n"
        "  %y = tg.dot %x, %w : tensor<16x18xf32>\n"
        "  %r = tg.max %y, %y : tensor<16x18xf32>\n"
        "  return %r\n}\n"
    )
    x = RNG.standard_normal((16, 20)).astype(np.float32)
    w = RNG.standard_normal((20, 18)).astype(np.float32)
    module = parse_tg(src)
    got = compile_module(module, "lowered", pipeline="cuda").run(args=[x, w]).results[0]
    assert any(
        isinstance(op, memref.GetGlobalOp) and is_workgroup(op.memref.type) for op in module.walk()
    )
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)


@needs_nvcc
def test_the_tiled_cuda_source_uses_shared_memory_and_compiles():
    source = render_kernels(tiled(CONV, "cuda"), CUDATarget())
    assert "__shared__ float" not in source  # 5x5 outputs: too small for 16x16 tiles
    source = render_kernels(tiled(CONV), CUDATarget())
    assert source.count("__shared__ float") == 2 and source.count("__syncthreads();") == 2
    assert nvcc_errors(source) is None
