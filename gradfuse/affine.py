"""Affine access maps: building them for views, simplifying them, evaluating them.

A view `y = view(x)` is an affine map from y's indices to x's indices, so a
chain of views composes into one map, and a consumer reads `x[map(i)]`
without a copy. Maps are simplified knowing each dim's size, which turns the
seed's `(((Global % 255) % 255) % 255)` into `d1`:

    >>> reshape_map((2, 255), (510,))   # (d0) -> (d0 floordiv 255, d0 mod 255)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from math import gcd, prod

import numpy as np
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineConstraintExpr,
    AffineConstraintKind,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
    AffineSet,
    AffineSymExpr,
)

Linear = tuple[dict[AffineExpr, int], int]
"""Sum of coefficient * atom plus a constant; atoms are dims or opaque div/mod terms."""


@cache
def dims(n: int) -> tuple[AffineExpr, ...]:
    """(d0, ..., d{n-1})."""
    return tuple(AffineExpr.dimension(i) for i in range(n))


@cache
def identity_map(rank: int) -> AffineMap:
    """(d0, ..., d{rank-1}) -> (d0, ..., d{rank-1})."""
    return AffineMap(rank, 0, dims(rank))


def strides_of(shape: Sequence[int]) -> list[int]:
    """Row-major strides: (2, 3, 4) -> [12, 4, 1]."""
    return [prod(shape[i + 1 :]) for i in range(len(shape))]


def reshape_map(in_shape: Sequence[int], out_shape: Sequence[int]) -> AffineMap:
    """Indices of `out_shape` -> indices of `in_shape` for a row-major reshape."""
    d = dims(len(out_shape))
    linear: AffineExpr = AffineExpr.constant(0)
    for expr, stride in zip(d, strides_of(out_shape)):
        linear = linear + expr * stride
    results = []
    for k, (size, stride) in enumerate(zip(in_shape, strides_of(in_shape))):
        e = linear // stride if stride != 1 else linear
        results.append(e % size if k > 0 else e)
    return simplify(AffineMap(len(out_shape), 0, tuple(results)), out_shape)


def permute_map(perm: Sequence[int]) -> AffineMap:
    """Result dim i is input dim perm[i]: input index k is d[inverse(perm)[k]]."""
    d = dims(len(perm))
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return AffineMap(len(perm), 0, tuple(d[inverse[k]] for k in range(len(perm))))


def broadcast_map(in_shape: Sequence[int], out_shape: Sequence[int]) -> AffineMap:
    """Size-1 input dims read index 0."""
    d = dims(len(out_shape))
    results = [
        AffineExpr.constant(0) if a == 1 and b != 1 else d[k]
        for k, (a, b) in enumerate(zip(in_shape, out_shape))
    ]
    return AffineMap(len(out_shape), 0, tuple(results))


def slice_map(starts: Sequence[int], strides: Sequence[int]) -> AffineMap:
    """Result index i reads input index start + i * stride."""
    d = dims(len(starts))
    results = [d[k] * st + lo for k, (lo, st) in enumerate(zip(starts, strides))]
    return AffineMap(len(starts), 0, tuple(results))


# --- simplification with known dim sizes -------------------------------------------


def simplify(map: AffineMap, sizes: Sequence[int]) -> AffineMap:
    """Simplifies each result knowing that dim k ranges over [0, sizes[k])."""
    return _simplify(map, tuple(sizes))


@lru_cache(maxsize=8192)
def _simplify(map: AffineMap, sizes: tuple[int, ...]) -> AffineMap:
    return AffineMap(
        map.num_dims, map.num_symbols, tuple(simplify_expr(e, sizes) for e in map.results)
    )


def simplify_expr(expr: AffineExpr, sizes: Sequence[int]) -> AffineExpr:
    return _to_expr(linear(expr, sizes))


def linear(expr: AffineExpr, sizes: Sequence[int]) -> Linear:
    """`expr` as a sum of atoms times coefficients plus a constant, knowing each dim's
    size (a dim of size 1 is 0, a division that the sizes decide is gone):
    `d0 * 16 + d1 + 3` -> ({d0: 16, d1: 1}, 3); `d2 floordiv 4` stays an atom."""
    if isinstance(expr, AffineConstantExpr):
        return {}, expr.value
    if isinstance(expr, AffineDimExpr):
        return ({}, 0) if sizes[expr.position] == 1 else ({expr: 1}, 0)
    assert isinstance(expr, AffineBinaryOpExpr)
    lhs, rhs = linear(expr.lhs, sizes), linear(expr.rhs, sizes)
    if expr.kind == AffineBinaryOpKind.Add:
        terms = dict(lhs[0])
        for atom, coef in rhs[0].items():
            terms[atom] = terms.get(atom, 0) + coef
        return {a: c for a, c in terms.items() if c != 0}, lhs[1] + rhs[1]
    if expr.kind == AffineBinaryOpKind.Mul:
        if rhs[0] and lhs[0]:
            raise ValueError(f"not affine: {expr}")
        (terms, k), scale = (lhs, rhs[1]) if not rhs[0] else (rhs, lhs[1])
        return {a: c * scale for a, c in terms.items() if c * scale != 0}, k * scale
    if rhs[0]:
        raise ValueError(f"not affine: {expr}")
    return _divmod(expr.kind, lhs, rhs[1], sizes)


def row_block(expr: AffineExpr, row: int, rows: int, sizes: Sequence[int]) -> int | None:
    """c where `expr` is `c * d{row} + rest`, rest in [0, c) and free of the dims
    `d0 ... d{rows-1}` (a row's block of c elements along a flat axis: `14 * d0 + d1`
    over sizes (64, 14) gives 14); else None."""
    if _mentions_dims(expr, 0):
        return None  # (a gather's symbol)
    try:
        terms, k = linear(expr, sizes)
    except ValueError:
        return None
    c = terms.get(AffineExpr.dimension(row), 0)
    rest = ({a: v for a, v in terms.items() if a != AffineExpr.dimension(row)}, k)
    if c < 1 or any(_mentions_dims(a, rows) for a in rest[0]):
        return None
    lo, hi = _range(rest, sizes)
    return c if 0 <= lo and hi < c else None


def _mentions_dims(expr: AffineExpr, n: int) -> bool:
    """Whether `expr` uses one of the dims d0 ... d{n-1}, or a symbol."""
    if isinstance(expr, AffineDimExpr):
        return expr.position < n
    if isinstance(expr, AffineSymExpr):
        return True
    if isinstance(expr, AffineBinaryOpExpr):
        return _mentions_dims(expr.lhs, n) or _mentions_dims(expr.rhs, n)
    return False


def _divmod(kind: AffineBinaryOpKind, inner: Linear, c: int, sizes: Sequence[int]) -> Linear:
    terms, k = inner
    split = _split_divisor(inner, c, sizes)
    if split is not None and kind != AffineBinaryOpKind.CeilDiv:
        g, high, low = split  # inner = g * high + low with 0 <= low < g
        outer = _divmod(kind, high, c // g, sizes)
        if kind == AffineBinaryOpKind.FloorDiv:
            return outer
        scaled = {a: coef * g for a, coef in outer[0].items()}
        for atom, coef in low[0].items():
            scaled[atom] = scaled.get(atom, 0) + coef
        return scaled, outer[1] * g + low[1]
    multiple = {a: coef // c for a, coef in terms.items() if coef % c == 0}
    rest: Linear = ({a: coef for a, coef in terms.items() if coef % c != 0}, k % c)
    base = k - k % c  # the multiple of c inside the constant
    lo, hi = _range(rest, sizes)
    if kind == AffineBinaryOpKind.Mod:
        if 0 <= lo and hi < c:
            return rest
        return {_atom(kind, rest, c): 1}, 0
    if kind == AffineBinaryOpKind.FloorDiv:
        q_terms = dict(multiple)
        if lo // c == hi // c:
            return q_terms, base // c + lo // c
        q_terms[_atom(kind, rest, c)] = 1
        return q_terms, base // c
    return {_atom(kind, inner, c): 1}, 0  # ceildiv: left alone


def _split_divisor(
    inner: Linear, c: int, sizes: Sequence[int]
) -> tuple[int, Linear, Linear] | None:
    """A divisor 1 < g < c of c with inner = g * high + low and 0 <= low < g."""
    terms, k = inner
    for g in range(c - 1, 1, -1):
        if c % g:
            continue
        high = ({a: coef // g for a, coef in terms.items() if coef % g == 0}, k // g)
        low = ({a: coef for a, coef in terms.items() if coef % g}, k % g)
        lo, hi = _range(low, sizes)
        if high[0] and 0 <= lo and hi < g:
            return g, high, low
    return None


def _atom(kind: AffineBinaryOpKind, inner: Linear, c: int) -> AffineExpr:
    return AffineBinaryOpExpr(kind, _to_expr(inner), AffineExpr.constant(c))


def bounds(expr: AffineExpr, sizes: Sequence[int]) -> tuple[int, int]:
    """The least and greatest values of `expr` where each dim k ranges over [0, sizes[k]):
    `d0 * 16 + d1` over (4, 16) gives (0, 63); ValueError where it is not affine."""
    return _range(linear(expr, sizes), sizes)


def _range(lin: Linear, sizes: Sequence[int]) -> tuple[int, int]:
    terms, k = lin
    lo = hi = k
    for atom, coef in terms.items():
        a_lo, a_hi = _atom_range(atom, sizes)
        lo += min(coef * a_lo, coef * a_hi)
        hi += max(coef * a_lo, coef * a_hi)
    return lo, hi


def _atom_range(atom: AffineExpr, sizes: Sequence[int]) -> tuple[int, int]:
    if isinstance(atom, AffineDimExpr):
        return 0, sizes[atom.position] - 1
    assert isinstance(atom, AffineBinaryOpExpr) and isinstance(atom.rhs, AffineConstantExpr)
    c = atom.rhs.value
    if atom.kind == AffineBinaryOpKind.Mod:
        return 0, c - 1
    lo, hi = _range(linear(atom.lhs, sizes), sizes)
    if atom.kind == AffineBinaryOpKind.FloorDiv:
        return lo // c, hi // c
    return -(-lo // c), -(-hi // c)


def _order(atom: AffineExpr) -> tuple[int, str]:
    return (atom.position, "") if isinstance(atom, AffineDimExpr) else (1 << 30, str(atom))


def _to_expr(lin: Linear) -> AffineExpr:
    terms, k = lin
    expr: AffineExpr | None = None
    for atom in sorted(terms, key=_order):
        term = atom if terms[atom] == 1 else atom * terms[atom]
        expr = term if expr is None else expr + term
    if expr is None:
        return AffineExpr.constant(k)
    return expr + k if k else expr


# --- evaluation ----------------------------------------------------------------------


def eval_grid(map: AffineMap, shape: Sequence[int]) -> tuple[np.ndarray, ...]:
    """The map's results at every point of `shape`, as index arrays of that shape
    (broadcast views: the dims are evaluated as sparse index vectors, so no array of
    every point's coordinates is built)."""
    grid = np.indices(tuple(shape), dtype=np.int64, sparse=True) if shape else ()
    return tuple(np.broadcast_to(_eval(e, grid), tuple(shape)) for e in map.results)


def _eval(expr: AffineExpr, grid: Sequence[np.ndarray]) -> np.ndarray | int:
    if isinstance(expr, AffineConstantExpr):
        return expr.value
    if isinstance(expr, AffineDimExpr):
        return grid[expr.position]
    assert isinstance(expr, AffineBinaryOpExpr)
    a, b = _eval(expr.lhs, grid), _eval(expr.rhs, grid)
    match expr.kind:
        case AffineBinaryOpKind.Add:
            return a + b
        case AffineBinaryOpKind.Mul:
            return a * b
        case AffineBinaryOpKind.FloorDiv:
            return np.floor_divide(a, b)
        case AffineBinaryOpKind.Mod:
            return np.mod(a, b)
        case _:
            return -np.floor_divide(-a, b)


# --- guards: affine sets saying which points of a masked view read their input -----


def pad_guard(low: Sequence[int], sizes: Sequence[int]) -> AffineSet:
    """`low[k] <= d_k < low[k] + sizes[k]` for every dim (the inside of a padding)."""
    d = dims(len(low))
    cons = []
    for k, (lo, n) in enumerate(zip(low, sizes)):
        cons.append(AffineConstraintExpr(AffineConstraintKind.ge, d[k], AffineExpr.constant(lo)))
        cons.append(
            AffineConstraintExpr(AffineConstraintKind.ge, AffineExpr.constant(lo + n - 1), d[k])
        )
    return AffineSet(len(low), 0, tuple(cons))


def compose_guard(guard: AffineSet, map: AffineMap) -> AffineSet:
    """The guard of a view read through `map`: each constraint with its dims replaced."""
    cons = tuple(
        AffineConstraintExpr(c.kind, c.lhs.compose(map), c.rhs.compose(map))
        for c in guard.constraints
    )
    return AffineSet(map.num_dims, map.num_symbols, cons)


def join_guards(a: AffineSet | None, b: AffineSet | None) -> AffineSet | None:
    """Both guards at once (None: no guard)."""
    if a is None or b is None:
        return a or b
    return AffineSet(a.num_dims, a.num_symbols, a.constraints + b.constraints)


def simplify_guard(guard: AffineSet, sizes: Sequence[int]) -> AffineSet | None:
    """Drops the constraints that hold everywhere over `sizes` (None if all do); an
    inequality whose coefficients share a factor g is divided by it, the same points:
    `2 * d0 - 2 * d1 + 6 >= 0` -> `d0 - d1 + 3 >= 0`."""
    kept = []
    for c in guard.constraints:
        lin = linear(c.lhs - c.rhs, sizes)
        lo, hi = _range(lin, sizes)
        if c.kind == AffineConstraintKind.ge and lo >= 0:
            continue
        if c.kind == AffineConstraintKind.le and hi <= 0:
            continue
        if c.kind == AffineConstraintKind.eq and lo == hi == 0:
            continue
        g = gcd(*lin[0].values()) if c.kind != AffineConstraintKind.eq else 1
        if g > 1:  # g*e + k >= 0 is e + floor(k/g) >= 0; g*e + k <= 0 is e + ceil(k/g) <= 0
            k = lin[1] // g if c.kind == AffineConstraintKind.ge else -(-lin[1] // g)
            lin = ({a: coef // g for a, coef in lin[0].items()}, k)
        kept.append(AffineConstraintExpr(c.kind, _to_expr(lin), AffineExpr.constant(0)))
    return AffineSet(guard.num_dims, guard.num_symbols, tuple(kept)) if kept else None


def eval_guard(guard: AffineSet, shape: Sequence[int]) -> np.ndarray:
    """A boolean mask of `shape`: where every constraint holds."""
    grid = np.indices(tuple(shape), dtype=np.int64, sparse=True) if shape else ()
    mask = np.ones(tuple(shape), dtype=bool)
    for c in guard.constraints:
        value = np.broadcast_to(_eval(c.lhs - c.rhs, grid), tuple(shape))
        if c.kind == AffineConstraintKind.ge:
            mask &= value >= 0
        elif c.kind == AffineConstraintKind.le:
            mask &= value <= 0
        else:
            mask &= value == 0
    return mask


def guard_share(guard: AffineSet, sizes: Sequence[int], limit: int) -> float:
    """The share of the points of a domain of `sizes` where `guard` holds, counted over
    the dims its constraints mention (1.0, an upper bound, where those have more than
    `limit` points): `d0 mod 2 == 0` over [8, 4] -> 0.5."""
    used = sorted(set().union(*(c.lhs.used_dims() | c.rhs.used_dims() for c in guard.constraints)))
    if prod(sizes[d] for d in used) > limit:
        return 1.0
    into = [AffineExpr.dimension(used.index(d)) if d in used else AffineExpr.constant(0)
            for d in range(len(sizes))]  # fmt: skip
    only = compose_guard(guard, AffineMap(len(used), 0, tuple(into)))  # over `used` alone
    return float(eval_guard(only, [sizes[d] for d in used]).mean())
