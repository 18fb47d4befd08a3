"""Reverse-mode derivative rules of the tg ops, one small function per op (tinygrad style).

A rule gets an `Emitter` (which places the new ops before the `tg.grad` being
expanded, with the backward provenance of `op`), the forward `op` and the
cotangent `g` of its result; it returns one cotangent per operand of `op`, `None`
where the operand gets no gradient (masks, conditions). For `%z = tg.mul %x, %y`:

    %gx = tg.mul %g, %y : tensor<4xf32>
    %gy = tg.mul %g, %x : tensor<4xf32>

Conventions: `tg.max` sends the cotangent of a tie to its rhs (so `relu = max(x, 0)`
has gradient 0 at 0, as `tg.relu` and PyTorch do); `tg.reduce_max` splits it evenly
between tied maxima (as PyTorch's `amax`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType
from xdsl.ir import Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import FLOAT_TYPES, ints, shape_of
from gradfuse.dialects.tg_builder import Emitter, element_type
from gradfuse.passes.lib import conv

Cotangents = Sequence[SSAValue | None]
Rule = Callable[[Emitter, Any, SSAValue], Cotangents]

LN_2 = math.log(2.0)


# --- elementwise ------------------------------------------------------------------


def add_rule(e: Emitter, op: tg.AddOp, g: SSAValue) -> Cotangents:
    """z = x + y: (g, g)."""
    return g, g


def sub_rule(e: Emitter, op: tg.SubOp, g: SSAValue) -> Cotangents:
    """z = x - y: (g, -g)."""
    return g, e.neg(g)


def mul_rule(e: Emitter, op: tg.MulOp, g: SSAValue) -> Cotangents:
    """z = x * y: (g * y, g * x)."""
    return e.mul(g, op.rhs), e.mul(g, op.lhs)


def div_rule(e: Emitter, op: tg.DivOp, g: SSAValue) -> Cotangents:
    """z = x / y: (g / y, -(g / y) * z)."""
    gl = e.div(g, op.rhs)
    return gl, e.neg(e.mul(gl, op.result))


def max_rule(e: Emitter, op: tg.MaxOp, g: SSAValue) -> Cotangents:
    """z = max(x, y): g to the larger operand, ties to y."""
    lhs_wins = e.cmplt(op.rhs, op.lhs)  # ties go to the rhs
    zero = e.zeros_like(g)
    return e.where(lhs_wins, g, zero), e.where(lhs_wins, zero, g)


def neg_rule(e: Emitter, op: tg.NegOp, g: SSAValue) -> Cotangents:
    """z = -x: -g."""
    return (e.neg(g),)


def exp2_rule(e: Emitter, op: tg.Exp2Op, g: SSAValue) -> Cotangents:
    """z = 2**x: g * z * ln 2."""
    return (e.mul(g, e.scale(op.result, LN_2)),)


def expm1_rule(e: Emitter, op: tg.Expm1Op, g: SSAValue) -> Cotangents:
    """z = e**x - 1: g * (z + 1)."""
    return (e.mul(g, e.add(op.result, e.const(1.0, op.result))),)


def log1p_rule(e: Emitter, op: tg.Log1pOp, g: SSAValue) -> Cotangents:
    """z = ln(1 + x): g / (1 + x)."""
    return (e.div(g, e.add(op.input, e.const(1.0, op.input))),)


def log2_rule(e: Emitter, op: tg.Log2Op, g: SSAValue) -> Cotangents:
    """z = log2(x): g / (x * ln 2)."""
    return (e.div(g, e.scale(op.input, LN_2)),)


def sqrt_rule(e: Emitter, op: tg.SqrtOp, g: SSAValue) -> Cotangents:
    """z = sqrt(x): g / (2 z)."""
    return (e.div(g, e.scale(op.result, 2.0)),)


def recip_rule(e: Emitter, op: tg.RecipOp, g: SSAValue) -> Cotangents:
    """z = 1/x: -g * z * z."""
    return (e.neg(e.mul(g, e.mul(op.result, op.result))),)


def sin_rule(e: Emitter, op: tg.SinOp, g: SSAValue) -> Cotangents:
    """z = sin(x): g * cos(x), with cos(x) = sin(x + pi/2)."""
    cos = e.sin(e.add(op.input, e.const(math.pi / 2, op.input)))
    return (e.mul(g, cos),)


def erf_rule(e: Emitter, op: tg.ErfOp, g: SSAValue) -> Cotangents:
    """z = erf(x): g * 2/sqrt(pi) * exp(-x^2), with exp(y) = exp2(y * log2 e)."""
    x = op.input
    bell = e.exp2(e.scale(e.mul(x, x), -1.0 / LN_2))
    return (e.mul(g, e.scale(bell, 2.0 / math.sqrt(math.pi))),)


def atan2_rule(e: Emitter, op: tg.Atan2Op, g: SSAValue) -> Cotangents:
    """z = atan2(y, x): (g x / (x^2 + y^2), -g y / (x^2 + y^2))."""
    y, x = op.lhs, op.rhs
    over = e.div(g, e.add(e.mul(x, x), e.mul(y, y)))
    return e.mul(over, x), e.neg(e.mul(over, y))


def gather_rule(e: Emitter, op: tg.GatherOp, g: SSAValue) -> Cotangents:
    """z = gather(x, idx): x gets g scattered back (added where indices repeat). With
    one index per row, varying (idx of size 1 along dim: cross-entropy's targets), it is
    `where((arange - idx)^2 > 0.25, 0, g)` broadcast along dim: one elementwise chain,
    so it fuses into what reads it, with no zero fill and no scatter over x's shape."""
    dim, shape = op.dim.value.data, shape_of(op.input)
    if shape_of(op.index)[dim] != 1 or shape[dim] == 1 or _one_value(op.index):
        return e.emit(tg.ScatterAddOp(op.index, g, dim, shape)), None
    at = [1] * len(shape)
    at[dim] = shape[dim]
    ty = TensorType(element_type(op.index), at)
    arange = DenseIntOrFPElementsAttr.from_list(ty, [float(i) for i in range(shape[dim])])  # type: ignore[arg-type]
    positions = e.broadcast(e.emit(tg.ConstantOp(arange, ty)), shape)
    d = e.sub(positions, e.broadcast(op.index, shape))  # integers: d * d is 0 or >= 1
    return e.where(e.cmplt(0.25, e.mul(d, d)), 0.0, e.broadcast(g, shape)), None


def _one_value(v: SSAValue) -> bool:
    """Whether `v` is a broadcast (through reshapes) of one element, as the slot index
    of `TgBuilder.take` is: its scatter writes one slot, which `tg-fuse` adds in place."""
    while isinstance(v.owner, tg.BroadcastOp | tg.ReshapeOp):
        v = v.owner.operands[0]
    return math.prod(shape_of(v)) == 1


def scatter_add_rule(e: Emitter, op: tg.ScatterAddOp, g: SSAValue) -> Cotangents:
    """z = scatter_add(idx, src): src gets g gathered at the same indices."""
    return None, e.emit(tg.GatherOp(g, op.index, op.dim.value.data))


def random_rule(e: Emitter, op: tg.RandomOp, g: SSAValue) -> Cotangents:
    """Random numbers do not depend on their counter."""
    return (None,)


def conv2d_rule(e: Emitter, op: tg.Conv2dOp, g: SSAValue) -> Cotangents:
    """y = conv2d(x, w): x gets the transposed convolution of g, w the correlation of x and g."""
    geo = op.geometry
    dx = conv.conv2d_input_grad(e, g, op.weight, geo)
    return dx, conv.conv2d_weight_grad(e, op.input, g, geo)


def conv_transpose2d_rule(e: Emitter, op: tg.ConvTranspose2dOp, g: SSAValue) -> Cotangents:
    """y = conv_transpose2d(x, w): x gets conv2d(g, w), w the correlation of g and x."""
    geo = op.geometry
    return conv.conv2d(e, g, op.weight, geo), conv.conv2d_weight_grad(e, g, op.input, geo)


def windows_rule(e: Emitter, op: tg.WindowsOp, g: SSAValue) -> Cotangents:
    """y = windows(x): each x element gets the sum of the window slots that read it."""
    return (conv.windows_grad(e, g, op.geometry),)


def allreduce_rule(e: Emitter, op: tg.AllReduceOp, g: SSAValue) -> Cotangents:
    """y = allreduce(x) over the ranks: x gets the same all-reduce of g (each rank's y
    depends on every rank's x: dL/dx_s = sum_r dL/dy_r, or the mean for a mean)."""
    return (e.emit(tg.AllReduceOp(g, op.reduce.data)),)


def cmplt_rule(e: Emitter, op: tg.CmpLtOp, g: SSAValue) -> Cotangents:
    """A mask has no gradient."""
    return None, None


def where_rule(e: Emitter, op: tg.WhereOp, g: SSAValue) -> Cotangents:
    """z = c ? x : y: g to x where c, to y elsewhere, none to c."""
    zero = e.zeros_like(g)
    return None, e.where(op.cond, g, zero), e.where(op.cond, zero, g)


def cast_rule(e: Emitter, op: tg.CastOp, g: SSAValue) -> Cotangents:
    """Casts g back to the input element type; none from a mask."""
    source = element_type(op.input)
    if not isinstance(source, FLOAT_TYPES) or not isinstance(element_type(g), FLOAT_TYPES):
        return (None,)
    return (e.cast(g, source),)


# --- composites -------------------------------------------------------------------


def one_minus(e: Emitter, x: SSAValue) -> SSAValue:
    """`1 - x`."""
    return e.sub(e.const(1.0, x), x)


def sigmoid_rule(e: Emitter, op: tg.SigmoidOp, g: SSAValue) -> Cotangents:
    """z = sigmoid(x): g * z * (1 - z)."""
    y = op.result
    return (e.mul(g, e.mul(y, one_minus(e, y))),)


def tanh_rule(e: Emitter, op: tg.TanhOp, g: SSAValue) -> Cotangents:
    """z = tanh(x): g * (1 - z * z)."""
    y = op.result
    return (e.mul(g, one_minus(e, e.mul(y, y))),)


def relu_rule(e: Emitter, op: tg.ReluOp, g: SSAValue) -> Cotangents:
    """z = relu(x): g where x > 0, else 0."""
    positive = e.cmplt(e.zeros_like(op.input), op.input)
    return (e.where(positive, g, e.zeros_like(g)),)


def softmax_rule(e: Emitter, op: tg.SoftmaxOp, g: SSAValue) -> Cotangents:
    """z = softmax(x): z * (g - sum(g * z)) along the dim."""
    y, dim = op.result, op.dim.value.data
    total = e.expand_reduced(e.reduce_sum(e.mul(g, y), [dim]), shape_of(y), [dim])
    return (e.mul(y, e.sub(g, total)),)


# --- contraction and reductions ---------------------------------------------------


def dot_rule(e: Emitter, op: tg.DotOp, g: SSAValue) -> Cotangents:
    """C = A @ B: (dC @ B^T, A^T @ dC), transposing the last two dims."""
    return e.dot(g, e.transpose_last2(op.rhs)), e.dot(e.transpose_last2(op.lhs), g)


def reduce_sum_rule(e: Emitter, op: tg.ReduceSumOp, g: SSAValue) -> Cotangents:
    """g broadcast back over the reduced dims."""
    return (e.expand_reduced(g, shape_of(op.input), ints(op.dims)),)


def stop_gradient_rule(e: Emitter, op: tg.StopGradientOp, g: SSAValue) -> Cotangents:
    """No gradient flows back through `detach()`."""
    return (None,)


def reduce_mean_rule(e: Emitter, op: tg.ReduceMeanOp, g: SSAValue) -> Cotangents:
    """g / n broadcast back over the reduced dims (n: the count of reduced elements)."""
    shape, dims = shape_of(op.input), ints(op.dims)
    n = math.prod(shape[d] for d in dims)
    spread = e.expand_reduced(g, shape, dims)
    return (e.mul(spread, e.const(1.0 / n if n else float("nan"), spread)),)


def reduce_max_rule(e: Emitter, op: tg.ReduceMaxOp, g: SSAValue) -> Cotangents:
    """g to the maximal positions of x, split evenly between ties."""
    shape, dims = shape_of(op.input), ints(op.dims)
    peak = e.expand_reduced(op.result, shape, dims)
    below = e.cmplt(op.input, peak)  # x <= max everywhere, so "not below" is "== max"
    is_max = e.where(below, e.zeros_like(op.input), e.const(1.0, op.input))
    count = e.expand_reduced(e.reduce_sum(is_max, dims), shape, dims)
    return (e.mul(e.expand_reduced(g, shape, dims), e.div(is_max, count)),)


# --- movement ---------------------------------------------------------------------


def reshape_rule(e: Emitter, op: tg.ReshapeOp, g: SSAValue) -> Cotangents:
    """g reshaped back."""
    return (e.reshape(g, shape_of(op.input)),)


def permute_rule(e: Emitter, op: tg.PermuteOp, g: SSAValue) -> Cotangents:
    """g permuted by the inverse permutation."""
    perm = ints(op.perm)
    inverse = [perm.index(i) for i in range(len(perm))]
    return (e.permute(g, inverse),)


def broadcast_rule(e: Emitter, op: tg.BroadcastOp, g: SSAValue) -> Cotangents:
    """g summed over the broadcast dims, reshaped to the input."""
    small, big = shape_of(op.input), shape_of(op.result)
    dims = [i for i, (a, b) in enumerate(zip(small, big, strict=True)) if a != b]
    if not dims:
        return (g,)
    return (e.reshape(e.reduce_sum(g, dims), small),)


def slice_rule(e: Emitter, op: tg.SliceOp, g: SSAValue) -> Cotangents:
    """g put back at its window, zeros elsewhere (strides spread with zeros)."""
    shape = shape_of(op.input)
    starts, strides = ints(op.starts), ints(op.strides)
    if any(s > 1 for s in strides):
        g = spread_strided(e, g, strides)
    # the window now starts at `starts`; trim trailing zeros past the input, then pad
    window = shape_of(g)
    lengths = [min(w, n - s) for w, n, s in zip(window, shape, starts, strict=True)]
    if list(lengths) != list(window):
        g = e.slice(g, [0] * len(window), lengths)
    high = [n - s - k for n, s, k in zip(shape, starts, lengths, strict=True)]
    return (e.pad(g, starts, high),)


def spread_strided(e: Emitter, g: SSAValue, strides: Sequence[int]) -> SSAValue:
    """Puts `stride - 1` zeros after each element along each dim: [a, b] -> [a, 0, b, 0]."""
    shape = shape_of(g)
    interleaved = [d for n in shape for d in (n, 1)]
    g = e.reshape(g, interleaved)
    high = [d for s in strides for d in (0, s - 1)]
    g = e.pad(g, [0] * len(high), high)
    return e.reshape(g, [n * s for n, s in zip(shape, strides, strict=True)])


def pad_rule(e: Emitter, op: tg.PadOp, g: SSAValue) -> Cotangents:
    """The window of g that holds the input."""
    low, shape = ints(op.low), shape_of(op.input)
    return (e.slice(g, low, [lo + n for lo, n in zip(low, shape, strict=True)]),)


def concat_rule(e: Emitter, op: tg.ConcatOp, g: SSAValue) -> Cotangents:
    """One slice of g per input."""
    dim, full = op.dim.value.data, shape_of(op.result)
    pieces: list[SSAValue | None] = []
    offset = 0
    for x in op.inputs:
        n = shape_of(x)[dim]
        starts = [offset if i == dim else 0 for i in range(len(full))]
        limits = [offset + n if i == dim else d for i, d in enumerate(full)]
        pieces.append(e.slice(g, starts, limits))
        offset += n
    return pieces


RULES: dict[type[Operation], Rule] = {
    tg.AddOp: add_rule,
    tg.SubOp: sub_rule,
    tg.MulOp: mul_rule,
    tg.DivOp: div_rule,
    tg.MaxOp: max_rule,
    tg.NegOp: neg_rule,
    tg.Exp2Op: exp2_rule,
    tg.Expm1Op: expm1_rule,
    tg.Log2Op: log2_rule,
    tg.Log1pOp: log1p_rule,
    tg.SqrtOp: sqrt_rule,
    tg.RecipOp: recip_rule,
    tg.SinOp: sin_rule,
    tg.ErfOp: erf_rule,
    tg.Atan2Op: atan2_rule,
    tg.GatherOp: gather_rule,
    tg.ScatterAddOp: scatter_add_rule,
    tg.RandomOp: random_rule,
    tg.Conv2dOp: conv2d_rule,
    tg.ConvTranspose2dOp: conv_transpose2d_rule,
    tg.WindowsOp: windows_rule,
    tg.AllReduceOp: allreduce_rule,
    tg.CmpLtOp: cmplt_rule,
    tg.WhereOp: where_rule,
    tg.CastOp: cast_rule,
    tg.SigmoidOp: sigmoid_rule,
    tg.TanhOp: tanh_rule,
    tg.ReluOp: relu_rule,
    tg.SoftmaxOp: softmax_rule,
    tg.DotOp: dot_rule,
    tg.ReduceSumOp: reduce_sum_rule,
    tg.ReduceMaxOp: reduce_max_rule,
    tg.ReduceMeanOp: reduce_mean_rule,
    tg.StopGradientOp: stop_gradient_rule,
    tg.ReshapeOp: reshape_rule,
    tg.PermuteOp: permute_rule,
    tg.BroadcastOp: broadcast_rule,
    tg.SliceOp: slice_rule,
    tg.PadOp: pad_rule,
    tg.ConcatOp: concat_rule,
}
"""Derivative rule per op class. Leaves (constant, param, feeder) have no operands."""


def is_differentiable(value: SSAValue) -> bool:
    """Whether a value carries gradients: a tensor of floats (not an i1 mask)."""
    return isinstance(value.type, TensorType) and isinstance(element_type(value), FLOAT_TYPES)
