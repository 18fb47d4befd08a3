"""conv2d / conv_transpose2d: reference against direct loops, the decomposed
contraction against the reference, gradients against finite differences, and the
fused kernels against the reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _gradcheck import check_gradients

from gradfuse.backend.interpreters.kernel import run_kernels
from gradfuse.backend.interpreters.tg import run
from gradfuse.backend.interpreters.tg_conv import conv2d as ref_conv2d
from gradfuse.dialects import kernel as K
from gradfuse.dialects import tg
from gradfuse.dialects.tg_conv import ConvGeometry
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

GEOMETRIES = {
    "plain": ConvGeometry(2, 3, 5, 6, 4, 3, 3),
    "stride_pad": ConvGeometry(1, 2, 7, 7, 3, 3, 3, (2, 2), (1, 1)),
    "dilation": ConvGeometry(1, 2, 7, 6, 2, 2, 3, (1, 2), (1, 0), (2, 1)),
    "groups": ConvGeometry(2, 4, 5, 5, 6, 3, 1, (1, 1), (1, 0), (1, 1), 2),
    "dcgan_down": ConvGeometry(2, 2, 8, 8, 3, 4, 4, (2, 2), (1, 1)),
}


def loops(x: np.ndarray, w: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """conv2d by its definition, one output element at a time."""
    y = np.zeros((geo.n, geo.o, geo.oh, geo.ow))
    for n, o, i, j in itertools.product(*map(range, y.shape)):
        gi = o // geo.og
        for c, p, q in itertools.product(range(geo.cg), range(geo.kh), range(geo.kw)):
            r = i * geo.stride[0] + p * geo.dilation[0] - geo.padding[0]
            s = j * geo.stride[1] + q * geo.dilation[1] - geo.padding[1]
            if 0 <= r < geo.h and 0 <= s < geo.w:
                y[n, o, i, j] += x[n, gi * geo.cg + c, r, s] * w[o, c, p, q]
    return y


def data(geo: ConvGeometry, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w))
    w = rng.standard_normal((geo.o, geo.cg, geo.kh, geo.kw))
    return x, w


def conv_text(geo: ConvGeometry) -> str:
    t = lambda *s: "tensor<" + "".join(f"{d}x" for d in s) + "f32>"  # noqa: E731
    attrs = (
        f"stride=[{geo.stride[0]}, {geo.stride[1]}] padding=[{geo.padding[0]}, {geo.padding[1]}]"
        f" dilation=[{geo.dilation[0]}, {geo.dilation[1]}] groups={geo.groups}"
    )
    y = t(geo.n, geo.o, geo.oh, geo.ow)
    return (
        f"func @main(%x: {t(geo.n, geo.c, geo.h, geo.w)}, %w: {t(geo.o, geo.cg, geo.kh, geo.kw)},"
        f" %v: {y}) -> ({y}, {t(geo.n, geo.c, geo.h, geo.w)}) {{\n"
        f"  %y = tg.conv2d %x, %w {attrs} : {y}\n"
        f"  %z = tg.conv_transpose2d %v, %w {attrs.replace(' dilation', ' output_padding=[0, 0] dilation')}"
        f" : {t(geo.n, geo.c, geo.h, geo.w)}\n"
        "  return %y, %z\n}\n"
    )


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_reference_matches_the_definition(name):
    geo = GEOMETRIES[name]
    x, w = data(geo)
    np.testing.assert_allclose(ref_conv2d(x, w, geo), loops(x, w, geo), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_decomposed_and_fused_match_the_reference(name):
    geo = GEOMETRIES[name]
    src = conv_text(geo)
    module = parse_tg(src)
    if (
        geo.h
        != (geo.oh - 1) * geo.stride[0] - 2 * geo.padding[0] + geo.dilation[0] * (geo.kh - 1) + 1
    ):
        pytest.skip("conv_transpose2d would need output_padding for this geometry")
    x, w = (a.astype(np.float32) for a in data(geo))
    v = np.random.default_rng(1).standard_normal((geo.n, geo.o, geo.oh, geo.ow)).astype(np.float32)
    want = run(module, args=[x, w, v]).results
    decomposed = parse_tg(src)
    run_pipeline(decomposed, "tg")
    assert not [
        op for op in decomposed.walk() if isinstance(op, tg.Conv2dOp | tg.ConvTranspose2dOp)
    ]
    for got, ref in zip(run(decomposed, args=[x, w, v]).results, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    fused = parse_tg(src)
    run_pipeline(fused, "kernels")
    assert sum(isinstance(op, K.KernelOp) for op in fused.walk()) == 2  # one contraction each
    for got, ref in zip(run_kernels(fused, args=[x, w, v]).results, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["plain", "stride_pad", "groups", "dilation"])
def test_gradients_against_finite_differences(name):
    geo = GEOMETRIES[name]
    small = ConvGeometry(1, geo.c, min(geo.h, 5), min(geo.w, 5), geo.o, min(geo.kh, 2), min(geo.kw, 3),
                         geo.stride, geo.padding, geo.dilation, geo.groups)  # fmt: skip

    def body(e, x, w):
        return e.emit(tg.Conv2dOp(x, w, small.stride, small.padding, small.dilation, small.groups))

    shapes = [(small.n, small.c, small.h, small.w), (small.o, small.cg, small.kh, small.kw)]
    check_gradients(body, shapes, rtol=1e-5, atol=1e-6)


def test_conv_transpose_gradients_against_finite_differences():
    def body(e, x, w):
        return e.emit(tg.ConvTranspose2dOp(x, w, (2, 2), (1, 1), (1, 1)))

    check_gradients(body, [(1, 2, 3, 3), (2, 3, 3, 3)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["plain", "stride_pad", "dilation"])
def test_windows_reference_decomposition_and_gradient(name):
    geo = GEOMETRIES[name]
    small = ConvGeometry(1, 2, min(geo.h, 5), min(geo.w, 6), 2, min(geo.kh, 3), min(geo.kw, 2),
                         geo.stride, geo.padding, geo.dilation, 2)  # fmt: skip

    def body(e, x):
        return e.emit(
            tg.WindowsOp(x, (small.kh, small.kw), small.stride, small.padding, small.dilation)
        )

    check_gradients(body, [(small.n, small.c, small.h, small.w)], rtol=1e-5, atol=1e-6)
    check_gradients(
        body, [(small.n, small.c, small.h, small.w)], decompose="after", rtol=1e-5, atol=1e-6
    )


def test_max_pool_as_windows_is_one_kernel():
    src = """
func @main(%x: tensor<1x2x6x6xf32>) -> (tensor<1x2x3x3xf32>) {
  %w = tg.windows %x kernel=[3, 3] stride=[2, 2] padding=[1, 1] dilation=[1, 1] : tensor<1x2x3x3x3x3xf32>
  %m = tg.reduce_max %w dims=[4, 5] : tensor<1x2x3x3xf32>
  return %m
}
"""
    x = np.abs(np.random.default_rng(2).standard_normal((1, 2, 6, 6))).astype(np.float32)
    want = run(parse_tg(src), args=[x]).results[0]
    fused = parse_tg(src)
    run_pipeline(fused, "kernels")
    assert sum(isinstance(op, K.KernelOp) for op in fused.walk()) == 1
    np.testing.assert_allclose(run_kernels(fused, args=[x]).results[0], want)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    direct = np.array([[[[xp[0, c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max() for j in range(3)]
                         for i in range(3)] for c in range(2)]])  # fmt: skip
    np.testing.assert_allclose(want, direct)
