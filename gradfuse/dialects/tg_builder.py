"""`TgBuilder`: the one API that builds tg IR, for the Python frontend and for passes.

A builder is told where ops go (`insert`) and how to report a misuse (`fail`); the
frontend's builder records at the user's line and verifies each op
(`gradfuse.frontend.recorder.RECORDING`), a pass's `Emitter` inserts through an xDSL
`Builder` with one location. Operands may be Python numbers (splat constants) and
shapes broadcast by NumPy's rules, made explicit:

    b.add(x, 1.0)        // %c = tg.constant 1.0 : tensor<2x3xf32>
                         // %y = tg.add %x, %c : tensor<2x3xf32>
    b.mul(x, bias)       // %r = tg.reshape %bias : tensor<1x3xf32>   (bias: tensor<3xf32>)
                         // %b = tg.broadcast %r : tensor<2x3xf32>
                         // %z = tg.mul %x, %b : tensor<2x3xf32>

Ops are built as their constructors build them, through `create` and shared types and
attributes: the generic constructors cost 3x, and autodiff builds many.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.builder import Builder
from xdsl.dialects.builtin import f32, i1
from xdsl.ir import Attribute, Operation, SSAValue

from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg_compute as C
from gradfuse.dialects import tg_elementwise as E
from gradfuse.dialects import tg_sparse as S
from gradfuse.dialects.tg_base import shape_of
from gradfuse.dialects.tg_builder_shapes import (  # noqa: F401 (one place to import from)
    ShapeBuilder,
    element_type,
    i64s,
    keepdims_shape,
    tensor_type,
)
from gradfuse.dialects.tg_canonicalize import splat
from gradfuse.dialects.tg_program import ForOp, extend_loop

Operand = SSAValue | float | int
LOG2_E = 1.0 / math.log(2.0)
LN_2 = math.log(2.0)


def _binary_method(cls: type[E.BinaryOp]) -> Callable[[TgBuilder, Operand, Operand], SSAValue]:
    """The `TgBuilder` method building `cls` on two operands: `add = _binary_method(E.AddOp)`."""
    return lambda self, a, b: self.binary(cls, a, b)


def _unary_method(cls: type[Operation]) -> Callable[[TgBuilder, SSAValue], SSAValue]:
    """The `TgBuilder` method building `cls` on one operand: `neg = _unary_method(E.NegOp)`."""
    return lambda self, x: self.unary(cls, x)


class TgBuilder(ShapeBuilder):
    """Builds tg ops through `insert` (which places an op and returns it); misuse is
    reported through `fail(message)`, which returns the exception to raise. Shapes,
    movement and reductions are `ShapeBuilder`'s; the elementwise ops are here."""

    # --- elementwise ----------------------------------------------------------------

    def unary(self, cls: type[Operation], x: SSAValue) -> SSAValue:
        """An elementwise op on one operand (composites included): its result has its type."""
        return self.emit(cls.create(operands=[x], result_types=[x.type]))

    def binary(self, cls: type[E.BinaryOp], a: Operand, b: Operand) -> SSAValue:
        """An elementwise op on two operands, broadcast; numbers become splat constants."""
        if not (isinstance(a, SSAValue) and isinstance(b, SSAValue) and a.type == b.type):
            a, b = self.broadcast_together(cls.name, [a, b])
        ty = a.type
        if cls.RESULT_IS_MASK:
            ty = tensor_type(shape_of(a), i1)
        return self.emit(cls.create(operands=[a, b], result_types=[ty]))

    add = _binary_method(E.AddOp)
    sub = _binary_method(E.SubOp)
    mul = _binary_method(E.MulOp)
    div = _binary_method(E.DivOp)
    max = _binary_method(E.MaxOp)
    cmplt = _binary_method(C.CmpLtOp)
    """The mask `a < b`."""
    neg = _unary_method(E.NegOp)
    exp2 = _unary_method(E.Exp2Op)
    log2 = _unary_method(E.Log2Op)
    sqrt = _unary_method(E.SqrtOp)
    recip = _unary_method(E.RecipOp)
    sin = _unary_method(E.SinOp)

    def scale(self, x: SSAValue, factor: float) -> SSAValue:
        """`x * factor` with a splat constant."""
        return self.mul(x, self.const(factor, x))

    def where(self, cond: SSAValue, a: Operand, b: Operand) -> SSAValue:
        """`tg.where` after broadcasting all three; `cond` is a mask (i1)."""
        branches = [v for v in (a, b) if isinstance(v, SSAValue)]
        if not branches:
            raise self.fail("where: at least one branch must be a tensor")
        if element_type(cond) != i1:
            raise self.fail(
                f"tg.where: the condition must be a mask (from a comparison), got {cond.type}"
            )
        cond, a, b = self.broadcast_together("tg.where", [cond, a, b], element_type(branches[0]))
        return self.emit(C.WhereOp.create(operands=[cond, a, b], result_types=[a.type]))

    def cast(self, x: SSAValue, element: Attribute) -> SSAValue:
        """`tg.cast` to another element type (masks to floats); `x` if it has that type."""
        if element_type(x) == element:
            return x
        ty = tensor_type(shape_of(x), element)
        return self.emit(C.CastOp.create(operands=[x], result_types=[ty]))

    def compare_ne(self, a: Operand, b: Operand, element: Attribute) -> SSAValue:
        """The mask `a != b`, true where either is NaN (IEEE's, PyTorch's):
        `0.5 < cast(a < b) + cast(b < a) + cast(nan(a)) + cast(nan(b))` (casts to
        `element`; a number's term only if it is NaN)."""
        return self.cmplt(0.5, self._count([self.cmplt(a, b), self.cmplt(b, a)], a, b, element))

    def compare_le(self, a: Operand, b: Operand, element: Attribute) -> SSAValue:
        """The mask `a <= b`, false where either is NaN (IEEE's, PyTorch's):
        `cast(b < a) + cast(nan(a)) + cast(nan(b)) < 0.5`."""
        return self.cmplt(self._count([self.cmplt(b, a)], a, b, element), 0.5)

    def _count(
        self, masks: list[SSAValue], a: Operand, b: Operand, element: Attribute
    ) -> SSAValue:
        """The sum of `masks` (cast to `element`) and of the NaN masks of `a` and `b`: a
        tensor's `finite_count(x) < 0.5`, a NaN number's 1."""
        total = self.cast(masks[0], element)
        for mask in masks[1:]:
            total = self.add(total, self.cast(mask, element))
        for x in (a, b):
            if isinstance(x, SSAValue):
                nan = self.cmplt(self.finite_count(x, element), 0.5)
                total = self.add(total, self.cast(nan, element))
            elif math.isnan(x):
                total = self.add(total, 1.0)
        return total

    def finite_count(self, x: SSAValue, element: Attribute) -> SSAValue:
        """`cast(x < inf) + cast(-inf < x)`: 2 where `x` is finite, 1 where infinite, 0
        where NaN (for which no comparison holds)."""
        below, above = self.cmplt(x, math.inf), self.cmplt(-math.inf, x)
        return self.add(self.cast(below, element), self.cast(above, element))

    def logical_not(self, mask: SSAValue, element: Attribute) -> SSAValue:
        """`not mask` for an i1 mask: `cast(mask) < 0.5` (the cast to `element`)."""
        return self.cmplt(self.cast(mask, element), 0.5)

    # --- stacks: one slot per loop iteration ----------------------------------------

    def _slot_index(self, stack: SSAValue, counter: SSAValue) -> SSAValue:
        """The gather/scatter index of slot `counter` (a tensor<1xf32>) of `stack`."""
        slot = [1, *shape_of(stack)[1:]]
        return self.broadcast(self.reshape(counter, [1] * len(slot)), slot)

    def take(self, stack: SSAValue, counter: SSAValue) -> SSAValue:
        """Slot `counter` of `stack` (`stack[c]`, c a tensor<1xf32> holding an integer):

        %r = tg.reshape %c : tensor<1x1x1xf32>
        %i = tg.broadcast %r : tensor<1x2x3xf32>
        %g = tg.gather %stack, %i dim=0 : tensor<1x2x3xf32>   // stack: 5x2x3
        %x = tg.reshape %g : tensor<2x3xf32>
        """
        got = self.emit(S.GatherOp(stack, self._slot_index(stack, counter), 0))
        return self.reshape(got, shape_of(stack)[1:])

    def getitem_step(
        self, x: SSAValue, keys: tuple, d: int, counter: SSAValue, count: int
    ) -> SSAValue:
        """`x[keys]` where `keys[d]` is the step of a loop of `count` steps, whose number
        `counter` holds: dim d moves first, `take` reads its slot, the other keys apply.
        `x[:, t]` on [B, T, H] is `take(permute(x, [1, 0, 2]), t)`, [B, H]."""
        shape = shape_of(x)
        if any(k is Ellipsis for k in keys[:d]):
            raise self.fail("x[...]: no ... before a loop step in an index")
        if d >= len(shape) or shape[d] != count:
            got = f"{shape[d]} entries" if d < len(shape) else "no entries"
            raise self.fail(f"x[t]: the loop has {count} steps, but the tensor's dim {d} has {got}")
        if d:
            x = self.permute(x, [d, *(i for i in range(len(shape)) if i != d)])
        out = self.take(x, counter)
        rest = keys[:d] + keys[d + 1 :]
        return self.getitem(out, rest) if rest else out

    def put(self, stack: SSAValue, counter: SSAValue, value: SSAValue) -> SSAValue:
        """`stack` with `value` added into slot `counter` (a slot written once, from
        zeros, holds `value`): `stack + scatter_add(index of c, value)`."""
        index = self._slot_index(stack, counter)
        src = self.reshape(value, shape_of(index))
        return self.add(stack, self.emit(S.ScatterAddOp(index, src, 0, shape_of(stack))))


def stack_in_loop(
    loop: ForOp,
    values: Sequence[SSAValue],
    before: TgBuilder,
    inside: TgBuilder,
    counter: SSAValue | None = None,
) -> tuple[ForOp, list[SSAValue]]:
    """`loop` rebuilt (`extend_loop`) to also stack `values` of its body, one slot per
    iteration: slot `counter` (a carried tensor<1xf32> of the body), or a new counter
    0, 1, ... when None. The empty stacks are built with `before` (ahead of the loop),
    the slot writes with `inside` (in the body); returns the new loop and the full
    stacks after it:

        %s0 = tg.constant 0.0 : tensor<3x2xf32>
        %r, %s = tg.for ... iter(%h = %x, %t = %s0) { ...; tg.yield %h2, <put %t, %c, %v> }
    """
    n, k = loop.trip_count, len(loop.inits)
    inits = [before.const(0.0, tensor_type((n, *shape_of(v)), element_type(v))) for v in values]
    if counter is None:  # a counter 0, 1, ... the loop has already (a scan's step)
        counter = next((a for a, cs in step_counters(loop).items() if cs == (0.0, 1.0)), None)
    if counter is None:
        inits.append(before.const(0.0, tensor_type((1,), f32)))

    def nexts(args: Sequence[SSAValue]) -> list[SSAValue]:
        slot = args[-1] if counter is None else counter
        puts = [inside.put(s, slot, v) for s, v in zip(args, values)]
        return puts if counter is not None else [*puts, inside.add(slot, 1.0)]

    new = extend_loop(loop, inits, nexts)
    return new, list(new.results[k : k + len(values)])


def increments(loop: ForOp) -> list[SSAValue | None]:
    """Per carried value of `loop`, x where the body yields `value + x` (a `tg.add`
    either way round), else None: what each iteration adds to it."""
    block = loop.body.block
    out: list[SSAValue | None] = []
    for arg, nxt in zip(block.args[1:], block.last_op.operands):  # type: ignore[union-attr]
        add = nxt.owner
        if not isinstance(add, E.AddOp) or arg not in add.operands:
            out.append(None)
        else:
            out.append(add.rhs if add.lhs is arg else add.lhs)
    return out


def step_counters(loop: ForOp) -> dict[SSAValue, tuple[float, float]]:
    """The carried tensor<1xf32> values of `loop` that start at a constant c and add a
    constant s each iteration (step counters, c + s * t at iteration t), with (c, s):

        %r, %n = tg.for %i = 0 to 5 step 1 iter(%h = %x, %t = %zero) { ...
          %t1 = tg.add %t, %one : tensor<1xf32>
          tg.yield %h1, %t1                      // {%t: (0.0, 1.0)}
    """
    out: dict[SSAValue, tuple[float, float]] = {}
    args = loop.body.block.args[1:]
    for arg, init, step in zip(args, loop.inits, increments(loop)):
        if step is not None and shape_of(arg) == (1,):
            start, by = splat(init), splat(step)
            if start is not None and by is not None:
                out[arg] = (start, by)
    return out


class Emitter(TgBuilder):
    """A pass's builder: inserts through `builder`, every op at `location`.

    `Emitter(rewriter, loc).mul(x, 2.0)` emits `%c = tg.constant 2.0` and
    `%y = tg.mul %x, %c`, both at `loc`; `emitted` lists every op it inserted."""

    def __init__(
        self, builder: Builder, location: Attribute, emitted: list[Operation] | None = None
    ):
        super().__init__(self._insert, self._fail)
        self.builder = builder
        self.location = location
        self.emitted = [] if emitted is None else emitted
        """Every op this emitter inserted, in order (a list that emitters may share)."""

    def at(self, location: Attribute) -> Emitter:
        """An emitter at the same insertion point, recording into the same list."""
        return Emitter(self.builder, location, self.emitted)

    def _insert(self, op: Operation) -> Operation:
        """Inserts `op` at the builder's point with this emitter's location."""
        op.location = self.location
        self.builder.insert(op)
        self.emitted.append(op)
        return op

    def _fail(self, message: str) -> Exception:
        return GradfuseError(message, position_of(self.location))
