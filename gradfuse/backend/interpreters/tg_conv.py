"""Reference semantics of `tg.conv2d` and `tg.conv_transpose2d` (PyTorch's, NCHW).

Written directly from the definitions with NumPy, independent of the
contraction form that `tg-decompose` produces:

    y[n, o, i, j] = sum_{c, p, q} x[n, g(o)*cg + c, i*sh + p*dh - ph, j*sw + q*dw - pw] * w[o, c, p, q]
"""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls

from gradfuse.backend.runner import RunState, dtype_of
from gradfuse.dialects import tg
from gradfuse.dialects.tg_conv import ConvGeometry


def conv2d(x: np.ndarray, w: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """The forward convolution, one kernel tap at a time."""
    (sh, sw), (ph, pw), (dh, dw) = geo.stride, geo.padding, geo.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.zeros((geo.n, geo.o, geo.oh, geo.ow), dtype=np.result_type(x, w))
    for gi in range(geo.groups):
        xs = xp[:, gi * geo.cg : (gi + 1) * geo.cg]
        ws = w[gi * geo.og : (gi + 1) * geo.og]
        for p in range(geo.kh):
            for q in range(geo.kw):
                tap = xs[
                    :, :, p * dh : p * dh + sh * geo.oh : sh, q * dw : q * dw + sw * geo.ow : sw
                ]
                y[:, gi * geo.og : (gi + 1) * geo.og] += np.einsum(
                    "nchw,oc->nohw", tap, ws[:, :, p, q]
                )
    return y


def conv2d_input_grad(g: np.ndarray, w: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """The adjoint of `conv2d` in x (= conv_transpose2d of g with w), by scattering taps."""
    (sh, sw), (ph, pw), (dh, dw) = geo.stride, geo.padding, geo.dilation
    xp = np.zeros(
        (geo.n, geo.c, geo.h + 2 * ph + sh, geo.w + 2 * pw + sw), dtype=np.result_type(g, w)
    )
    for gi in range(geo.groups):
        gs = g[:, gi * geo.og : (gi + 1) * geo.og]
        ws = w[gi * geo.og : (gi + 1) * geo.og]
        for p in range(geo.kh):
            for q in range(geo.kw):
                contrib = np.einsum("nohw,oc->nchw", gs, ws[:, :, p, q])
                xp[:, gi * geo.cg : (gi + 1) * geo.cg,
                   p * dh : p * dh + sh * geo.oh : sh, q * dw : q * dw + sw * geo.ow : sw] += contrib  # fmt: skip
    return xp[:, :, ph : ph + geo.h, pw : pw + geo.w]


def windows(x: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """The sliding windows [n, c, oh, ow, kh, kw] of x, 0 outside it."""
    (sh, sw), (ph, pw), (dh, dw) = geo.stride, geo.padding, geo.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph + sh * geo.oh), (pw, pw + sw * geo.ow)))
    out = np.zeros((geo.n, geo.c, geo.oh, geo.ow, geo.kh, geo.kw), dtype=x.dtype)
    for p in range(geo.kh):
        for q in range(geo.kw):
            out[..., p, q] = xp[
                :, :, p * dh : p * dh + sh * geo.oh : sh, q * dw : q * dw + sw * geo.ow : sw
            ]
    return out


@register_impls
class ConvFunctions(InterpreterFunctions):
    """`@impl`s of the convolutions."""

    def __init__(self, state: RunState):
        self.state = state

    def out(self, op, value) -> PythonValues:
        return (np.asarray(value, dtype=dtype_of(op.result.type, self.state.dtype)),)

    @impl(tg.Conv2dOp)
    def run_conv2d(self, interp: Interpreter, op: tg.Conv2dOp, args: PythonValues) -> PythonValues:
        return self.out(op, conv2d(np.asarray(args[0]), np.asarray(args[1]), op.geometry))

    @impl(tg.WindowsOp)
    def run_windows(
        self, interp: Interpreter, op: tg.WindowsOp, args: PythonValues
    ) -> PythonValues:
        return self.out(op, windows(np.asarray(args[0]), op.geometry))

    @impl(tg.ConvTranspose2dOp)
    def run_conv_transpose2d(
        self, interp: Interpreter, op: tg.ConvTranspose2dOp, args: PythonValues
    ) -> PythonValues:
        return self.out(
            op, conv2d_input_grad(np.asarray(args[0]), np.asarray(args[1]), op.geometry)
        )
