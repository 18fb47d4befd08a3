"""`kernel-split-phases`: a strided transposed convolution visits only its live taps.

A transposed convolution of stride s (and the input gradient of a strided convolution)
reads its input at `(oh - kh + p) floordiv s` where `(oh - kh + p) mod s == 0`, and 0
elsewhere: at stride 2, three taps in four multiply a zero. Split each output index by
its phase, `oh = s * q + r`, and only the taps `kh = s * t + ((p + r) mod s)` are
live: the phase picks them. The kernel's domain says so (`redomain`), the guard's
`mod` constraint holds at every point left and is dropped, and the loops built from
the domain run over a quarter of the taps (the polyphase form of a transposed
convolution):

```
kernel.kernel "k0" contraction domain [2, 8, 8, 8, 16, 4, 4] parallel 4
  %a = kernel.load %x[affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4,
        (d2 - d5 + 1) floordiv 2, (d3 - d6 + 1) floordiv 2)>]
        {guard = affine_set<(...) : (d2 - d5 + 1 >= 0, ..., (d2 - d5 + 1) mod 2 == 0,
        (d3 - d6 + 1) mod 2 == 0)>}
// becomes (d0, d1 the phases of the rows and columns; d4 = oh floordiv 2, d6 = ow floordiv 2)
kernel.kernel "k0" contraction domain [2, 2, 2, 8, 4, 4, 16, 2, 2] parallel 6
  %a = kernel.load %x[affine_map<(d0, ..., d8) -> (d2, d6,
        d4 - d7 + (d0 - (d0 + 1) mod 2 + 1) floordiv 2, ...)>] {guard = (bounds only)}
  kernel.store %v, %y[affine_map<(d0, ..., d5) -> (d2, d3, d4 * 2 + d0, d5 * 2 + d1)>]
```

Leaving out a reduction point is exact only where its term is 0: every reduction of
the kernel adds, and each term is a product with the guarded read as a factor. The
split needs the guard to read one output dim and one reduction dim, each with a
coefficient of 1 or -1, and the output dim's size to be a multiple of s. A window of
taps that is not (3 x 3 at stride 2: ResNet-18's downsampling convolutions and its max
pool) runs over ceil(3 / 2) = 2 taps a phase, every access of the tap a load: the
tap's reads are bounded, `2 * t + 1 - r <= 2` (past the window's end 0), but for a
padded window's read whose guard keeps it inside its buffer at any tap, where every
term has another factor bounded so (the output gradient beside the weight): that read
stays a plain padded one (`loops-pad`), and `loops-pack` copies the weight with 0 past
its taps. ResNet-18 b8's six strided input gradients took 55 -> 19 ms a 3-step chunk
(one thread). A weight gradient of a transposed convolution (taps parallel, positions
reduced) splits the same way. In a `kernel.rows` the phase dims go after the rows,
which stay first.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import AffineSetAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstraintExpr,
    AffineConstraintKind,
    AffineDimExpr,
    AffineExpr,
    AffineSet,
)
from xdsl.passes import ModulePass

from gradfuse import affine
from gradfuse.dialects import kernel as K
from gradfuse.passes.lib.kernel_domain import (
    ACCESS,
    kernels_and_rows,
    redomain,
    simplify_guards,
)


@dataclass(frozen=True)
class Phase:
    """`(a * d{free} + b * d{tied} + c) mod m == 0`: the constraint `constraint` of a
    guard, `tied` a reduction dim, b = ±1."""

    constraint: AffineConstraintExpr
    free: int
    tied: int
    a: int
    b: int
    c: int
    m: int


def _phase(c: AffineConstraintExpr, sizes: tuple[int, ...], npar: int, first: int):
    """The constraint as a `Phase`, or None when it is not one this pass splits."""
    if c.kind != AffineConstraintKind.eq:
        return None
    try:
        terms, k = affine.linear(c.lhs - c.rhs, sizes)
    except ValueError:
        return None
    if k != 0 or len(terms) != 1:
        return None
    [(atom, coef)] = terms.items()
    if coef != 1 or not isinstance(atom, AffineBinaryOpExpr):
        return None
    if atom.kind != AffineBinaryOpKind.Mod:
        return None
    m = atom.rhs.value  # type: ignore[union-attr]
    inner, const = affine.linear(atom.lhs, sizes)
    if len(inner) != 2 or not all(isinstance(d, AffineDimExpr) for d in inner):
        return None
    (x, cx), (y, cy) = sorted(inner.items(), key=lambda t: t[0].position)  # type: ignore[union-attr]
    if y.position < npar or x.position < first:  # type: ignore[union-attr]
        return None  # (the later dim must be reduced; the earlier not a row dim)
    if cy not in (1, -1) or sizes[x.position] % m:  # type: ignore[union-attr]
        return None  # (a tied dim that is no multiple of m ends in a guarded tap)
    return Phase(c, x.position, y.position, cx, cy, const, m)  # type: ignore[union-attr]


def _zero_where_failing(v: SSAValue, c: AffineConstraintExpr) -> bool:
    """Whether `v` is 0 wherever constraint `c` fails: a read guarded by it, or a product
    (or negation) of such a value."""
    op = v.owner
    if isinstance(op, K.LoadOp):
        return op.guard is not None and c in op.guard.data.constraints
    if isinstance(op, arith.MulfOp):
        return _zero_where_failing(op.lhs, c) or _zero_where_failing(op.rhs, c)
    if isinstance(op, arith.NegfOp):
        return _zero_where_failing(op.operand, c)
    return False


def dead_phases(k: K.KernelOp) -> list[AffineConstraintExpr]:
    """The equalities in the guards of `k`'s reads (a stride's phase, `(oh - kh + 1) mod
    2 == 0`, or what it simplifies to over a dim of 2, `d2 == 0`) where every sum's term
    is 0 wherever they fail: the points they leave out are no work, whether or not
    `split_phase` can split the kernel on them (a transposed convolution's zeros between
    its input's pixels). The profiler counts without them; padding's bounds (`>=`) stay.

        dead_phases(k)  # [(d2 - d5 + 1) mod 2 == 0, (d3 - d6 + 1) mod 2 == 0]
    """
    reduces = [op for op in k.body.block.ops if isinstance(op, K.ReduceOp)]
    if not reduces or any(r.kind.data != "add" for r in reduces):
        return []
    found: list[AffineConstraintExpr] = []
    for op in k.body.block.ops:
        if isinstance(op, K.LoadOp) and op.guard is not None:
            for c in op.guard.data.constraints:
                if c.kind == AffineConstraintKind.eq and c not in found:
                    if all(_zero_where_failing(r.value, c) for r in reduces):
                        found.append(c)
    return found


def find_phase(k: K.KernelOp, first: int = 0) -> Phase | None:
    """The first guard constraint of `k` that `split_phase` can split on."""
    sizes, npar = k.domain_sizes, k.num_parallel
    reduces = [op for op in k.body.block.ops if isinstance(op, K.ReduceOp)]
    if not reduces or any(r.kind.data != "add" for r in reduces):
        return None
    args = k.body.block.args
    for op in k.body.block.ops:
        if not isinstance(op, K.LoadOp) or op.guard is None:
            continue
        for c in op.guard.data.constraints:
            p = _phase(c, sizes, npar, first)
            if p is None or args[p.free].uses or args[p.tied].uses:
                continue
            if sizes[p.tied] % p.m and any(
                _uses(o, p.tied) and not isinstance(o, K.LoadOp)
                for o in k.body.block.ops
                if isinstance(o, ACCESS)
            ):
                continue  # (every access of the tap a load, to be bounded: see _guard_taps)
            if all(_zero_where_failing(r.value, c) for r in reduces):
                return p
    return None


def _uses(op: Operation, dim: int) -> bool:
    """Whether `op`'s access map or guard reads dim `dim`."""
    exprs = list(op.map.data.results)  # type: ignore[attr-defined]
    if (guard := getattr(op, "guard", None)) is not None:
        exprs += [e for c in guard.data.constraints for e in (c.lhs, c.rhs)]
    return any(dim in e.used_dims() for e in exprs)


def _in_bounds(op: K.LoadOp, tied: int, sizes: tuple[int, ...]) -> bool:
    """Whether `op`'s guard bounds each index that reads dim `tied` on both sides,
    `e >= 0` and `size - 1 - e >= 0` (a padded window's read: in its buffer at any tap)."""
    if op.guard is None:
        return False
    bounds = set()
    for c in op.guard.data.constraints:
        if c.kind == AffineConstraintKind.ge:
            terms, k = affine.linear(c.lhs - c.rhs, sizes)
            bounds.add((frozenset(terms.items()), k))
    shape = op.buffer.type.get_shape()  # type: ignore[attr-defined]
    for e, size in zip(op.map.data.results, shape):
        if tied not in e.used_dims():
            continue
        try:
            terms, k = affine.linear(e, sizes)
        except ValueError:
            return False
        low = any(t == frozenset(terms.items()) and c <= k for t, c in bounds)  # e >= k - c
        neg = frozenset((a, -v) for a, v in terms.items())
        high = any(t == neg and c + k <= size - 1 for t, c in bounds)  # e <= k + c
        if not (low and high):
            return False
    return True


def _guard_taps(k: K.KernelOp, tied: int, tap: AffineExpr, size: int) -> None:
    """Adds `tap <= size - 1` to the guard of the loads of `k` that read dim `tied`: the
    taps past the end of a dim padded to a multiple of the stride read 0. A load that
    its guard keeps in its buffer at any tap (`_in_bounds`: a padded window's read)
    goes without, where every sum's term has a factor that takes the bound (a weight)."""
    bound = AffineConstraintExpr(
        AffineConstraintKind.ge, AffineExpr.constant(size - 1) - tap, AffineExpr.constant(0)
    )
    loads = [op for op in k.body.block.ops if isinstance(op, K.LoadOp) and _uses(op, tied)]
    bounded = [op for op in loads if not _in_bounds(op, tied, k.domain_sizes)]
    for op in bounded:
        _add_constraint(op, bound)
    reduces = [op for op in k.body.block.ops if isinstance(op, K.ReduceOp)]
    if not all(_zero_where_failing(r.value, bound) for r in reduces):
        for op in loads:
            if op not in bounded:
                _add_constraint(op, bound)


def _add_constraint(op: K.LoadOp, c: AffineConstraintExpr) -> None:
    within = AffineSet(op.map.data.num_dims, 0, (c,))
    guard = affine.join_guards(op.guard.data if op.guard is not None else None, within)
    op.properties["guard"] = AffineSetAttr(guard)  # type: ignore[arg-type]


def _residue(r: AffineExpr, s: int, t: int, m: int) -> AffineExpr:
    """`(s * r + t) mod m` over r in [0, m): a line where it is one (always at m = 2,
    where the phases' taps are then `2 * t + 1 - r`), else the `mod`."""
    values = [(s * x + t) % m for x in range(m)]
    step = values[1] - values[0] if m > 1 else 0
    if all(v == values[0] + step * x for x, v in enumerate(values)):
        return r * step + values[0]
    return (r * s + t) % m


def split_phase(k: K.KernelOp, p: Phase, before: int = 0) -> None:
    """`d{free} = m * q + r` with the phase r a new dim after the first `before` of the
    parallel dims (or of the reduction dims, when d{free} is reduced);
    `d{tied} = m * t + ((-b * (a * r + c)) mod m)`, the one residue where the constraint
    holds, which is then dropped from every guard."""
    sizes, npar = k.domain_sizes, k.num_parallel
    lead = before if p.free < npar else npar + before  # where the phase dim goes
    new_sizes = [-(-size // p.m) if d in (p.free, p.tied) else size for d, size in enumerate(sizes)]
    new_sizes.insert(lead, p.m)
    r = AffineExpr.dimension(lead)
    subst = [AffineExpr.dimension(d + (d >= lead)) for d in range(len(sizes))]
    subst[p.free] = subst[p.free] * p.m + r
    subst[p.tied] = subst[p.tied] * p.m + _residue(r, -p.b * p.a, -p.b * p.c, p.m)
    holds = {  # the constraint's places in every guard, which redomain keeps
        op: {n for n, c in enumerate(guard.data.constraints) if c == p.constraint}
        for op in k.body.block.ops
        if (guard := getattr(op, "guard", None)) is not None
    }
    redomain(k, new_sizes, npar + (p.free < npar), subst)
    simplify_guards(k, holds)
    if sizes[p.tied] % p.m:
        _guard_taps(k, p.tied + (p.tied >= lead), subst[p.tied], sizes[p.tied])


def split_phases(k: K.KernelOp, first: int = 0) -> bool:
    """Splits `k` on each phase constraint in turn; whether any was split. The first
    `first` dims, the rows of the `kernel.rows` that holds `k`, stay first: a parallel
    phase dim goes after them (and after the phases before it)."""
    parallel = reduced = 0  # phase dims so far: each new one goes after them
    while (p := find_phase(k, first)) is not None:
        if p.free < k.num_parallel:
            split_phase(k, p, first + parallel)
            parallel += 1
        else:
            split_phase(k, p, reduced)
            reduced += 1
    return bool(parallel or reduced)


@dataclass(frozen=True)
class KernelSplitPhasesPass(ModulePass):
    """Splits strided transposed convolutions by output phase so that dead taps drop out.

    `ir-opt model.tg -p kernels,kernel-split-phases -t kernels`
    """

    name = "kernel-split-phases"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k, rows in kernels_and_rows(op):
            split_phases(k, rows)
