"""Convolutions as contractions over guarded views (im2col by access maps).

For a conv2d with `groups` g, every piece is a batched `tg.dot` over g whose
operands are `tg.view`s: the patches of the input (padding in the view's guard),
the weight laid out as a matrix, and the result viewed back to NCHW. The three
functions give the forward conv2d, its weight gradient and its input gradient
(which is also conv_transpose2d):

    patches[g, m, k] = x[n, g*cg + c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]
    m = (n, oh, ow) flattened, k = (c, kh, kw) flattened, 0 outside the input
"""

from __future__ import annotations

from xdsl.ir import SSAValue
from xdsl.ir.affine import (
    AffineConstraintExpr,
    AffineConstraintKind,
    AffineExpr,
    AffineMap,
    AffineSet,
)

from gradfuse import affine
from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import Emitter
from gradfuse.dialects.tg_conv import ConvGeometry

GE, EQ = AffineConstraintKind.ge, AffineConstraintKind.eq


def unflatten(e: AffineExpr, sizes: tuple[int, ...]) -> list[AffineExpr]:
    """The row-major coordinates of a flat index `e` over `sizes`."""
    out = []
    for k, size in enumerate(sizes):
        stride = 1
        for s in sizes[k + 1 :]:
            stride *= s
        part = e // stride if stride != 1 else e
        out.append(part % size if k > 0 else part)
    return out


def _ge(a: AffineExpr, b: int | AffineExpr) -> AffineConstraintExpr:
    return AffineConstraintExpr(GE, a, b if isinstance(b, AffineExpr) else AffineExpr.constant(b))


def _inside(ih: AffineExpr, iw: AffineExpr, geo: ConvGeometry) -> list[AffineConstraintExpr]:
    """`(ih, iw)` lies inside the (unpadded) input."""
    h, w = AffineExpr.constant(geo.h - 1), AffineExpr.constant(geo.w - 1)
    return [_ge(ih, 0), _ge(h, ih), _ge(iw, 0), _ge(w, iw)]


def _on_output(ty: AffineExpr, tx: AffineExpr, geo: ConvGeometry) -> list[AffineConstraintExpr]:
    """`(ty, tx)` is `(oh * sh, ow * sw)` for an output position `(oh, ow)`."""
    last_y = AffineExpr.constant((geo.oh - 1) * geo.stride[0])
    last_x = AffineExpr.constant((geo.ow - 1) * geo.stride[1])
    zero = AffineExpr.constant(0)
    return [
        _ge(ty, 0), _ge(last_y, ty), _ge(tx, 0), _ge(last_x, tx),
        AffineConstraintExpr(EQ, ty % geo.stride[0], zero),
        AffineConstraintExpr(EQ, tx % geo.stride[1], zero),
    ]  # fmt: skip


def _view(
    e: Emitter, x: SSAValue, results: list[AffineExpr], shape: tuple[int, ...], guard=None
) -> SSAValue:
    map = affine.simplify(AffineMap(len(shape), 0, tuple(results)), shape)
    if guard:
        guard = affine.simplify_guard(AffineSet(len(shape), 0, tuple(guard)), shape)
    return e.emit(tg.ViewAccessOp(x, map, shape, guard or None))


def _patches(e: Emitter, x: SSAValue, geo: ConvGeometry, transpose: bool) -> SSAValue:
    """x's patches as [g, m, k] (or [g, k, m] with `transpose`)."""
    m_size, k_size = geo.n * geo.oh * geo.ow, geo.cg * geo.kh * geo.kw
    d = affine.dims(3)
    m, k = (d[2], d[1]) if transpose else (d[1], d[2])
    n, oh, ow = unflatten(m, (geo.n, geo.oh, geo.ow))
    c, kh, kw = unflatten(k, (geo.cg, geo.kh, geo.kw))
    ih = oh * geo.stride[0] + kh * geo.dilation[0] - geo.padding[0]
    iw = ow * geo.stride[1] + kw * geo.dilation[1] - geo.padding[1]
    shape = (geo.groups, k_size, m_size) if transpose else (geo.groups, m_size, k_size)
    return _view(e, x, [n, d[0] * geo.cg + c, ih, iw], shape, _inside(ih, iw, geo))


def conv2d(e: Emitter, x: SSAValue, w: SSAValue, geo: ConvGeometry) -> SSAValue:
    """y[n, o, oh, ow] = sum over (c, kh, kw) of patches * w: one batched dot."""
    d = affine.dims(3)
    c, kh, kw = unflatten(d[1], (geo.cg, geo.kh, geo.kw))
    weight = _view(
        e, w, [d[0] * geo.og + d[2], c, kh, kw], (geo.groups, geo.cg * geo.kh * geo.kw, geo.og)
    )
    y3 = e.dot(_patches(e, x, geo, False), weight)  # [g, m, og]
    o = affine.dims(4)
    flat = o[0] * (geo.oh * geo.ow) + o[2] * geo.ow + o[3]
    return _view(e, y3, [o[1] // geo.og, flat, o[1] % geo.og], (geo.n, geo.o, geo.oh, geo.ow))


def conv2d_weight_grad(e: Emitter, x: SSAValue, g: SSAValue, geo: ConvGeometry) -> SSAValue:
    """dw[o, c, kh, kw] = sum over (n, oh, ow) of g * patches: one batched dot."""
    d = affine.dims(3)
    n, oh, ow = unflatten(d[1], (geo.n, geo.oh, geo.ow))
    gm = _view(
        e, g, [n, d[0] * geo.og + d[2], oh, ow], (geo.groups, geo.n * geo.oh * geo.ow, geo.og)
    )
    dw3 = e.dot(_patches(e, x, geo, True), gm)  # [g, k, og]
    o = affine.dims(4)
    flat = o[1] * (geo.kh * geo.kw) + o[2] * geo.kw + o[3]
    return _view(e, dw3, [o[0] // geo.og, flat, o[0] % geo.og], (geo.o, geo.cg, geo.kh, geo.kw))


def conv2d_input_grad(e: Emitter, g: SSAValue, w: SSAValue, geo: ConvGeometry) -> SSAValue:
    """dx[n, c, ih, iw] = sum over (o, kh, kw) of g at (ih + ph - kh*dh) / sh (where
    that divides and lies inside) * w: one batched dot; also conv_transpose2d."""
    d = affine.dims(3)
    n, ih, iw = unflatten(d[1], (geo.n, geo.h, geo.w))
    og, kh, kw = unflatten(d[2], (geo.og, geo.kh, geo.kw))
    ty = ih + geo.padding[0] - kh * geo.dilation[0]  # = oh * sh where it divides
    tx = iw + geo.padding[1] - kw * geo.dilation[1]
    oh, ow = ty // geo.stride[0], tx // geo.stride[1]
    shape = (geo.groups, geo.n * geo.h * geo.w, geo.og * geo.kh * geo.kw)
    gp = _view(e, g, [n, d[0] * geo.og + og, oh, ow], shape, _on_output(ty, tx, geo))
    og2, kh2, kw2 = unflatten(d[1], (geo.og, geo.kh, geo.kw))
    wk = _view(e, w, [d[0] * geo.og + og2, d[2], kh2, kw2], (geo.groups, shape[2], geo.cg))
    dx3 = e.dot(gp, wk)  # [g, n*h*w, cg]
    o = affine.dims(4)
    flat = o[0] * (geo.h * geo.w) + o[2] * geo.w + o[3]
    return _view(e, dx3, [o[1] // geo.cg, flat, o[1] % geo.cg], (geo.n, geo.c, geo.h, geo.w))


def windows(e: Emitter, x: SSAValue, geo: ConvGeometry) -> SSAValue:
    """The sliding windows [n, c, oh, ow, kh, kw] of x: one guarded view."""
    d = affine.dims(6)
    ih = d[2] * geo.stride[0] + d[4] * geo.dilation[0] - geo.padding[0]
    iw = d[3] * geo.stride[1] + d[5] * geo.dilation[1] - geo.padding[1]
    shape = (geo.n, geo.c, geo.oh, geo.ow, geo.kh, geo.kw)
    return _view(e, x, [d[0], d[1], ih, iw], shape, _inside(ih, iw, geo))


def windows_grad(e: Emitter, g: SSAValue, geo: ConvGeometry) -> SSAValue:
    """The adjoint of `windows`: each input element sums the window slots that read it
    (a guarded view of g to [n, c, h, w, kh, kw], reduced over kh, kw)."""
    d = affine.dims(6)
    ty = d[2] + geo.padding[0] - d[4] * geo.dilation[0]
    tx = d[3] + geo.padding[1] - d[5] * geo.dilation[1]
    shape = (geo.n, geo.c, geo.h, geo.w, geo.kh, geo.kw)
    at = [d[0], d[1], ty // geo.stride[0], tx // geo.stride[1], d[4], d[5]]
    spread = _view(e, g, at, shape, _on_output(ty, tx, geo))
    return e.reduce_sum(spread, [4, 5])
