"""`kernel-split-phases`: transposed convolutions (and input gradients of strided ones)
split by output phase give the reference's numbers on the kernel interpreter, visit a
quarter of the taps at stride 2, and are left alone where a skipped term is not 0."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
from xdsl.dialects import arith

from gradfuse.backend.interpreters.kernel import run_kernels
from gradfuse.backend.interpreters.tg import run
from gradfuse.dialects import kernel as K
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline
from gradfuse.passes.kernel.split_phases import find_phase, split_phases

TRANSPOSED = """
func @main(%x: tensor<2x3x{h}x{h}xf32>, %w: tensor<3x4x{k}x{k}xf32>) -> (tensor<2x4x{o}x{o}xf32>) {{
  %y = tg.conv_transpose2d %x, %w stride=[{s}, {s}] padding=[{p}, {p}] output_padding=[{q}, {q}] dilation=[1, 1] groups=1 : tensor<2x4x{o}x{o}xf32>
  return %y
}}
"""

INPUT_GRAD = """
func @main(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x4x4xf32>, %r: tensor<2x4x4x4xf32>) -> (tensor<2x3x8x8xf32>) {
  %y = tg.conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x4x4x4xf32>
  %z = tg.mul %y, %r : tensor<2x4x4x4xf32>
  %g = tg.grad %z wrt %x : tensor<2x3x8x8xf32>
  return %g
}
"""

# (stride, padding, kernel, input size, output padding): taps and outputs a multiple of
# the stride; at stride 3 with padding 1 the live taps are (r + 1) mod 3, not a line
GEOMETRIES = [(2, 1, 4, 4, 0), (2, 0, 2, 3, 0), (3, 0, 6, 3, 0), (3, 1, 6, 3, 2), (2, 2, 4, 5, 0)]


def transposed(s: int, p: int, k: int, h: int, q: int = 0) -> str:
    return TRANSPOSED.format(s=s, p=p, k=k, h=h, q=q, o=(h - 1) * s - 2 * p + k + q)


def kernels(src: str, passes: str):
    module = parse_tg(src)
    run_pipeline(module, passes)
    return module, [op for op in module.walk() if isinstance(op, K.KernelOp)]


def contraction(src: str) -> K.KernelOp:
    _, ks = kernels(src, "kernels,kernel-split-dims")
    return next(k for k in ks if k.kind.data == "contraction")


@pytest.mark.parametrize("src", [*(transposed(*g) for g in GEOMETRIES), INPUT_GRAD])
def test_split_kernels_match_the_reference(src: str) -> None:
    rng = np.random.default_rng(0)
    module, ks = kernels(src, "kernels,kernel-split-dims,kernel-split-phases")
    conv = next(k for k in ks if k.kind.data == "contraction")
    before = contraction(src)
    # every phase constraint gone, and the reduction a 1/s^2 of what it was
    assert "mod 2) == 0" not in str(conv) and "mod 3) == 0" not in str(conv)
    s = int(src.split("stride=[")[1].split(",")[0])
    taps = prod(before.domain_sizes[before.num_parallel :])
    assert prod(conv.domain_sizes[conv.num_parallel :]) * s * s == taps
    assert prod(conv.domain_sizes[: conv.num_parallel]) == prod(
        before.domain_sizes[: before.num_parallel]
    )
    fn = parse_tg(src).ops.first
    args = [rng.standard_normal(t.get_shape()).astype(np.float32) for t in fn.function_type.inputs]
    reference = parse_tg(src)
    run_pipeline(reference, "tg")
    want = run(reference, args=args).results
    got = run_kernels(module, args=args).results
    for g, w in zip(got, want, strict=True):
        # float32 sums of at most 16 products of N(0, 1) values (4 channels x 2 x 2 taps); a
        # float64 run puts the split kernels within 0.044 of this tolerance at worst
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_term_that_is_not_zero_where_the_read_is_keeps_its_taps() -> None:
    k = contraction(transposed(2, 1, 4, 4))
    assert find_phase(k) is not None
    mul = next(op for op in k.body.block.ops if isinstance(op, arith.MulfOp))
    add = arith.AddfOp(mul.lhs, mul.rhs)  # x + w: w where x reads 0
    k.body.block.insert_op_before(add, mul)
    mul.result.replace_all_uses_with(add.result)
    mul.detach()
    mul.erase()
    assert find_phase(k) is None and not split_phases(k)


def test_a_max_reduction_keeps_its_taps() -> None:
    k = contraction(transposed(2, 1, 4, 4))
    reduce = next(op for op in k.body.block.ops if isinstance(op, K.ReduceOp))
    reduce.properties["kind"] = type(reduce.kind)("max")
    assert find_phase(k) is None


def test_taps_not_a_multiple_of_the_stride_are_left_alone() -> None:
    k = contraction(transposed(2, 1, 3, 4))
    assert "mod 2" in str(k) and find_phase(k) is None
