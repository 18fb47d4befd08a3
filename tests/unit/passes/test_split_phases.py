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
func @main(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x{k}x{k}xf32>, %r: tensor<2x4x4x4xf32>) -> (tensor<2x3x8x8xf32>) {{
  %y = tg.conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x4x4x4xf32>
  %z = tg.mul %y, %r : tensor<2x4x4x4xf32>
  %g = tg.grad %z wrt %x : tensor<2x3x8x8xf32>
  return %g
}}
"""

MAX_POOL_GRAD = """
func @main(%x: tensor<2x3x8x8xf32>, %r: tensor<2x3x4x4xf32>) -> (tensor<2x3x8x8xf32>) {
  %w = tg.windows %x kernel=[3, 3] stride=[2, 2] padding=[1, 1] dilation=[1, 1] : tensor<2x3x4x4x3x3xf32>
  %m = tg.reduce_max %w dims=[4, 5] : tensor<2x3x4x4xf32>
  %z = tg.mul %m, %r : tensor<2x3x4x4xf32>
  %g = tg.grad %z wrt %x : tensor<2x3x8x8xf32>
  return %g
}
"""
"""A 3 x 3 max pool of stride 2 (ResNet-18's): its input gradient sums the window slots
that read each input, a reduction over 3 x 3 taps of which a quarter to a half live."""

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


def summing(ks: list[K.KernelOp]) -> K.KernelOp:
    """The kernel that sums the taps: the contraction, or a max pool's reduction."""
    return next(k for k in ks if k.kind.data != "elementwise" and "mod" in str(k))


@pytest.mark.parametrize(
    ("src", "k"),
    [*((transposed(*g), g[2]) for g in GEOMETRIES), (INPUT_GRAD.format(k=4), 4),
     (MAX_POOL_GRAD, 3), (INPUT_GRAD.format(k=3), 3), (transposed(2, 1, 3, 4, 1), 3)],
)  # fmt: skip
def test_split_kernels_match_the_reference(src: str, k: int) -> None:
    rng = np.random.default_rng(0)
    before = summing(kernels(src, "kernels,kernel-split-dims")[1])
    name = before.sym_name.data
    module, ks = kernels(src, "kernels,kernel-split-dims,kernel-split-phases")
    conv = next(k for k in ks if k.sym_name.data == name)
    # every phase constraint gone, and the taps of a window dim of k a ceil(k / s)
    assert "mod 2) == 0" not in str(conv) and "mod 3) == 0" not in str(conv)
    s = int(src.split("stride=[")[1].split(",")[0])
    taps = prod(before.domain_sizes[before.num_parallel :])
    assert prod(conv.domain_sizes[conv.num_parallel :]) * k * k == taps * (-(-k // s)) ** 2
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


def test_outputs_not_a_multiple_of_the_stride_are_left_alone() -> None:
    k = contraction(transposed(2, 1, 3, 4))  # 7 x 7 outputs
    assert "mod 2" in str(k) and find_phase(k) is None


def test_taps_past_a_window_padded_to_the_stride_read_zero() -> None:
    _, ks = kernels(MAX_POOL_GRAD, "kernels,kernel-split-dims,kernel-split-phases")
    pool = next(k for k in ks if len(k.domain_sizes) == 8)  # [2, 2 | 2, 3, 4, 4 | 2, 2]
    [load] = [op for op in pool.body.block.ops if isinstance(op, K.LoadOp)]
    guard = str(load.guard.data)  # taps 2 * t + 1 - r, t = d6 and d7 of [2, 2]: at most 2
    assert "((d0 + (d6 * -2)) + 1) >= 0" in guard
    assert "(((d7 * -2) + (d1 + -1)) + 2) >= 0" in guard


def test_a_weight_past_a_window_padded_to_the_stride_reads_zero() -> None:
    """ResNet-18's downsampling input gradient (3 x 3 taps at stride 2): the weight's
    reads take the bound of the taps; the output gradient's, a padded window's read
    whose guard keeps it inside its buffer at every tap, do not (its product with the
    weight is 0 there), so `loops-pad` can still read it from a padded copy."""
    _, ks = kernels(INPUT_GRAD.format(k=3), "kernels,kernel-split-dims,kernel-split-phases")
    [conv] = [k for k in ks if k.kind.data == "contraction"]
    bound = "((d0 + (d7 * -2)) + 1) >= 0"  # tap 2 * t + 1 - r, t = d7: at most 2
    loads = [op for op in conv.body.block.ops if isinstance(op, K.LoadOp)]
    by_shape = {op.buffer.type.get_shape(): str(op.guard.data) for op in loads}
    weight, grad = by_shape[(4, 3, 3, 3)], by_shape[(2, 4, 4, 4)]
    assert bound in weight
    assert bound not in grad and "mod" not in grad and ">= 0" in grad


def test_a_split_in_a_row_by_row_kernel_keeps_the_rows_first() -> None:
    """ResNet-18's max-pool gradient runs in a `kernel.rows` over (batch, channel) with
    the convolution gradient that feeds it. Split by phase, its phase dims go after
    those rows: put first, the rows' loops took their trip counts (8 and 64 for 2 and 2)
    and ResNet-18 b8's step took 645 ms against 148."""
    from example_programs import load_example  # tests/unit

    import gradfuse
    from gradfuse.dialects.kernel_rows import RowsOp
    from gradfuse.frontend.tracing import program

    gradfuse.reset()
    load_example("resnet18", BATCH=2, IMAGE=32, NUM_CLASSES=10).record(steps=2, log_every=2)
    module = program().module.clone()
    run_pipeline(module, "kernels,kernel-split-phases")
    module.verify()  # kernel.rows: each kernel's leading dims are its rows
    split = [
        k.domain_sizes
        for rows in module.walk()
        if isinstance(rows, RowsOp)
        for k in rows.body.block.ops
        if k.domain_sizes[2:4] == (2, 2)
    ]
    assert (2, 64, 2, 2, 8, 8, 2, 2) in split  # rows (2, 64), phases, 8x8, taps 2x2
