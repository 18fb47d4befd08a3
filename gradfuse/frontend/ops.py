"""SSA-level builders behind `Tensor`: each records tg ops through `recorder.emit`.

They take SSA values (or Python scalars where a splat constant will do) and return
SSA values; NumPy broadcasting becomes explicit `tg.reshape` + `tg.broadcast`:

    z = binary(tg.AddOp, x, 1.0)   # %c = tg.constant 1.0 ; %z = tg.add %x, %c
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import Float32Type, TensorType, i1
from xdsl.ir import Attribute, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import fmt_shape, shape_of, tensor
from gradfuse.frontend.recorder import emit, error

Operand = SSAValue | float | int

LOG2_E = 1.0 / math.log(2.0)
LN_2 = math.log(2.0)


def element_of(value: SSAValue) -> Attribute:
    """The element type of a tensor value."""
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.element_type


def const(number: float, shape: Sequence[int], element: Attribute) -> SSAValue:
    """A splat constant. `const(1.0, [2, 3], f32)` -> `tg.constant 1.0 : tensor<2x3xf32>`"""
    return emit(tg.ConstantOp(float(number), tensor(shape, element))).result


def reshape(value: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`tg.reshape` to `shape` (-1 infers one dim); no op when the shape is unchanged."""
    old = shape_of(value)
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise error(f"tg.reshape: only one dim may be -1, got {shape}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        total = math.prod(old)
        if known == 0 or total % known:
            raise error(f"tg.reshape: cannot reshape {fmt_shape(old)} to {shape}")
        shape[shape.index(-1)] = total // known
    if tuple(shape) == old:
        return value
    return emit(tg.ReshapeOp(value, shape)).result


def broadcast_shape(op: str, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """NumPy's broadcast of two shapes, or an error naming `op`."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise error(
                f"{op}: shapes cannot be broadcast together: {fmt_shape(a)} and {fmt_shape(b)}"
            )
        out.append(max(x, y) if x != 0 and y != 0 else 0)
    return tuple(out)


def broadcast_to(value: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`value` repeated to `shape` by NumPy rules (a reshape adds leading 1s first)."""
    old = shape_of(value)
    if old == tuple(shape):
        return value
    if len(old) < len(shape):
        value = reshape(value, (1,) * (len(shape) - len(old)) + old)
    return emit(tg.BroadcastOp(value, shape)).result


def _as_value(x: Operand, shape: Sequence[int], element: Attribute) -> SSAValue:
    return x if isinstance(x, SSAValue) else const(float(x), shape, element)


def binary(cls: type[tg.BinaryOp], a: Operand, b: Operand) -> SSAValue:
    """An elementwise binary op after broadcasting; scalars become splat constants."""
    op = cls.name
    values = [x for x in (a, b) if isinstance(x, SSAValue)]
    assert values, "binary needs at least one tensor"
    shape = (
        broadcast_shape(op, *[shape_of(v) for v in values])
        if len(values) == 2
        else shape_of(values[0])
    )
    element = element_of(values[0])
    lhs = broadcast_to(_as_value(a, shape, element), shape)
    rhs = broadcast_to(_as_value(b, shape, element), shape)
    return emit(cls(lhs, rhs)).result


def unary(cls: type[tg.UnaryOp], value: SSAValue) -> SSAValue:
    """An elementwise unary op (including the composites sigmoid, tanh, relu)."""
    return emit(cls(value)).result


def where(cond: SSAValue, a: Operand, b: Operand) -> SSAValue:
    """`tg.where` after broadcasting all three; `cond` is a mask (i1) or a float tensor."""
    values = [v for v in (a, b) if isinstance(v, SSAValue)]
    if not values:
        raise error("where: at least one branch must be a tensor")
    shapes = [shape_of(cond)] + [shape_of(v) for v in values]
    shape: tuple[int, ...] = shapes[0]
    for s in shapes[1:]:
        shape = broadcast_shape("tg.where", shape, s)
    element = element_of(values[0])
    if element_of(cond) != i1:
        raise error(f"tg.where: the condition must be a mask (from a comparison), got {cond.type}")
    c = broadcast_to(cond, shape)
    lhs = broadcast_to(_as_value(a, shape, element), shape)
    rhs = broadcast_to(_as_value(b, shape, element), shape)
    return emit(tg.WhereOp(c, lhs, rhs)).result


def compare_lt(a: Operand, b: Operand) -> SSAValue:
    """The mask `a < b` (`tg.cmplt`), broadcast."""
    return binary(tg.CmpLtOp, a, b)


def compare_ne(a: Operand, b: Operand) -> SSAValue:
    """The mask `a != b`: `(a < b) or (b < a)`, as `0.5 < cast(a < b) + cast(b < a)`."""
    lt, gt = compare_lt(a, b), compare_lt(b, a)
    either = binary(tg.AddOp, cast(lt, Float32Type()), cast(gt, Float32Type()))
    return compare_lt(0.5, either)


def logical_not(mask: SSAValue) -> SSAValue:
    """`not mask` for an i1 mask: `cast(mask) < 0.5`."""
    as_float = cast(mask, Float32Type())
    return compare_lt(as_float, 0.5)


def cast(value: SSAValue, element: Attribute) -> SSAValue:
    """`tg.cast` to another element type (masks to floats)."""
    if element_of(value) == element:
        return value
    return emit(tg.CastOp(value, element)).result


def normalize_dims(dim: int | Sequence[int] | None, rank: int, what: str) -> list[int]:
    """Reduction dims as a sorted list of non-negative ints (None: all dims)."""
    if dim is None:
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = []
    for d in dims:
        if not -rank <= d < max(rank, 1):
            raise error(f"{what}: dim {d} is out of range for a tensor of rank {rank}")
        out.append(d % rank if rank else 0)
    return sorted(set(out))


def reduce(
    cls: type[tg.ReduceOp], value: SSAValue, dim: int | Sequence[int] | None, keepdim: bool
) -> SSAValue:
    """`tg.reduce_sum` / `tg.reduce_max` over `dim` (all dims when None)."""
    shape = shape_of(value)
    dims = normalize_dims(dim, len(shape), cls.name)
    if not shape:
        return value
    out = emit(cls(value, dims)).result
    if keepdim:
        out = reshape(out, [1 if i in dims else n for i, n in enumerate(shape)])
    return out


def permute(value: SSAValue, perm: Sequence[int]) -> SSAValue:
    """`tg.permute`; no op for the identity permutation."""
    rank = len(shape_of(value))
    perm = [p % rank if rank else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise error(
            f"tg.permute: {list(perm)} is not a permutation of the dims of a rank-{rank} tensor"
        )
    if perm == list(range(rank)):
        return value
    return emit(tg.PermuteOp(value, perm)).result


def transpose(value: SSAValue, d0: int, d1: int) -> SSAValue:
    """Swaps dims `d0` and `d1`."""
    rank = len(shape_of(value))
    perm = list(range(rank))
    d0, d1 = normalize_dims(d0, rank, "transpose")[0], normalize_dims(d1, rank, "transpose")[0]
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return permute(value, perm)


def matmul(a: SSAValue, b: SSAValue) -> SSAValue:
    """`a @ b` with NumPy's rules: vectors are promoted, batch dims broadcast."""
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        raise error(
            f"tg.dot: matmul needs tensors of rank >= 1, got {fmt_shape(sa)} @ {fmt_shape(sb)}"
        )
    squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
    if squeeze_a:
        a = reshape(a, (1, sa[0]))
    if squeeze_b:
        b = reshape(b, (sb[0], 1))
    sa, sb = shape_of(a), shape_of(b)
    batch = broadcast_shape("tg.dot", sa[:-2], sb[:-2])
    a = broadcast_to(a, batch + sa[-2:])
    b = broadcast_to(b, batch + sb[-2:])
    out = emit(tg.DotOp(a, b)).result
    shape = list(shape_of(out))
    if squeeze_b:
        shape.pop(-1)
    if squeeze_a:
        shape.pop(-1 if squeeze_b else -2)
    return reshape(out, shape)


def getitem(value: SSAValue, key: object) -> SSAValue:
    """Basic indexing: ints, slices with positive steps, `...` and `None`."""
    shape = shape_of(value)
    items = list(key) if isinstance(key, tuple) else [key]
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise error(f"tg.slice: too many indices ({used}) for a tensor of rank {len(shape)}")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (len(shape) - used)
    items += [slice(None)] * (len(shape) - sum(1 for k in items if k is not None))
    starts, limits, strides, out_shape = [], [], [], []
    dim = 0
    for k in items:
        if k is None:
            out_shape.append(1)
            continue
        n = shape[dim]
        if isinstance(k, int):
            if not -n <= k < n:
                raise error(f"tg.slice: index {k} is out of range for dim {dim} of size {n}")
            k %= n
            starts.append(k), limits.append(k + 1), strides.append(1)
        elif isinstance(k, slice):
            lo, hi, st = k.indices(n)
            if st < 1:
                raise error(f"tg.slice: step must be positive, got {st}")
            hi = max(hi, lo)
            starts.append(lo), limits.append(hi), strides.append(st)
            out_shape.append(-(-(hi - lo) // st))
        else:
            raise error(f"tg.slice: unsupported index {k!r} (ints, slices, ... and None only)")
        dim += 1
    if (starts, limits, strides) != ([0] * len(shape), list(shape), [1] * len(shape)):
        value = emit(tg.SliceOp(value, starts, limits, strides)).result
    return reshape(value, out_shape)
