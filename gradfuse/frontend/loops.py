"""Recurrences traced once into a `tg.for`: `scan` (JAX's signature) and `steps` (a
Python `for` loop over the steps), both differentiable (`tg-autodiff` reverses loops).

    h, ys = gradfuse.scan(lambda h, x: (cell(x, h), h), h0, xs)   # xs: [T, B, I]

    loop = gradfuse.steps(T, h=h0)          # the tensors carried from step to step
    for t in loop:                          # the body is traced once
        loop.h = cell(x[t], loop.h)         # x[t]: step t of x (its first dim)
        loop.collect(y=loop.h)              # stacked over the steps: loop.y is [T, B, H]

Both record (the step number is carried as a `tensor<1xf32>` counter):

    %h, %t, %ys = tg.for %i = 0 to 35 step 1 iter(%a = %h0, %c = %zero, %s = %empty) {
      %x = <slot %c of %xs> ...
      tg.yield %h2, %c1, %s2
    }

Parameters read in the body are read before the loop, so gradients reach them.
A Python loop (`for t in range(T)`) still unrolls, and gives the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.dialects.tg_builder import TgBuilder, stack_in_loop
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import (
    Step,
    changed,
    emit,
    emit_before,
    error,
    insert_into,
    program,
)
from gradfuse.frontend.tensor import Tensor

Tree = Any


def flatten(tree: Tree, what: str) -> tuple[list[Tensor], Callable[[list[Tensor]], Tree]]:
    """The tensors of a tuple/list/dict tree (or one tensor, or None) and a function
    that rebuilds the tree from new leaves."""
    if tree is None:
        return [], lambda leaves: None
    if isinstance(tree, Tensor):
        return [tree], lambda leaves: leaves[0]
    if isinstance(tree, tuple | list):
        parts = [flatten(t, what) for t in tree]
    elif isinstance(tree, dict):
        parts = [flatten(t, what) for t in tree.values()]
    else:
        raise error(
            f"{what}: expected tensors (or tuples, lists, dicts of them), got {type(tree).__name__}"
        )
    sizes = [len(p[0]) for p in parts]

    def rebuild(leaves: list[Tensor]) -> Tree:
        out, at = [], 0
        for (_, build), n in zip(parts, sizes):
            out.append(build(leaves[at : at + n]))
            at += n
        if isinstance(tree, dict):
            return dict(zip(tree.keys(), out))
        return type(tree)(out) if isinstance(tree, tuple) else out

    return [t for p in parts for t in p[0]], rebuild


class TracedLoop:
    """One `tg.for` being traced: the constructor opens its body (later ops go there),
    `close` yields the next carried values and stacks the collected ones."""

    def __init__(self, what: str, count: int, inits: Sequence[Tensor], reverse: bool = False):
        if not isinstance(count, int) or count < 0:
            raise error(f"{what}: the number of steps must be an int >= 0, got {count!r}")
        self.what, self.count, self.reverse = what, count, reverse
        start = B.const(float(count - 1 if reverse else 0), tensor([1]))
        op = tg.ForOp(0, count, 1, [*(t.value for t in inits), start])
        self.body = op.body.block
        self.body.add_op(tg.YieldOp(self.body.args[1:]))
        self.loop: tg.ForOp = emit(op)
        self.prog = program()
        self.prog.scan_loops[id(self.body)] = self.loop
        self._inside = insert_into(self.body)
        self._inside.__enter__()
        self.step = Step(self.body.args[-1], count)
        self.carried = [Tensor(a) for a in self.body.args[1:-1]]

    def close(self, nexts: Sequence[Tensor], collected: Sequence[Tensor]) -> list[Tensor]:
        """Ends the body with `nexts` (one per carried tensor, of its shape); returns the
        carried tensors after the loop, then the stacks of `collected` ([count, ...])."""
        for k, (old, new) in enumerate(zip(self.carried, nexts, strict=True)):
            if not isinstance(new, Tensor) or new.value.type != old.value.type:
                got = type(new).__name__ if not isinstance(new, Tensor) else list(new.shape)
                raise error(
                    f"{self.what}: carried value {k} must keep its shape {list(old.shape)}"
                    f" and dtype from step to step, got {got}"
                )
        for c in collected:
            if not isinstance(c, Tensor):
                raise error(f"{self.what}: collects tensors, got {type(c).__name__}")
        counter = B.add(self.step.counter, -1.0 if self.reverse else 1.0)
        self.body.last_op.operands = [*(t.value for t in nexts), counter]  # type: ignore[union-attr]
        loop = self.loop
        if collected:
            before = TgBuilder(lambda op: emit_before(self.loop, op), error)
            values = [c.value for c in collected]
            loop, _ = stack_in_loop(loop, values, before, B, self.step.counter)
            changed()
        self._end()
        n = len(self.carried)
        return [Tensor(r) for r in (*loop.results[:n], *loop.results[n + 1 :])]

    def discard(self) -> None:
        """Removes the loop (the body raised, or was left): nothing of it stays."""
        self._end()
        self.loop.detach()
        self.loop.erase(safe_erase=False)
        changed()

    def _end(self) -> None:
        self._inside.__exit__(None, None, None)
        del self.prog.scan_loops[id(self.body)]
        self.prog.forget(self.body)


def scan(
    f: Callable[[Tree, Tree], tuple[Tree, Tree]],
    init: Tree,
    xs: Tree = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int = 1,
) -> tuple[Tree, Tree]:
    """JAX's `lax.scan`: `carry, y = f(carry, x)` for each slice x of `xs` (first dim);
    returns the last carry and the `y`s stacked on a new first dim. `f` is traced once.

    `h, hs = scan(lambda h, x: (tanh(x @ w + h @ u),) * 2, h0, xs)` records one tg.for.
    """
    leaves, rebuild_xs = flatten(xs, "scan")
    counts = {t.shape[0] if t.shape else None for t in leaves}
    if length is not None:
        counts.add(length)
    if len(counts) != 1 or None in counts:
        raise error(
            "scan: xs must all have the same first dim (the number of steps), and equal"
            f" length= when given; got {sorted(map(str, counts)) or 'no xs and no length'}"
        )
    if unroll != 1:
        raise error("scan: unroll= is not supported (gradfuse fuses the loop body instead)")
    carry, rebuild_carry = flatten(init, "scan")
    loop = TracedLoop("scan", counts.pop(), carry, reverse)
    try:
        x = rebuild_xs([t[loop.step] for t in leaves])
        out = f(rebuild_carry(loop.carried), x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise error("scan: f must return a pair (new carry, y)")
        new, rebuilt = flatten(out[0], "scan")
        if len(new) != len(carry):
            raise error(f"scan: f returned {len(new)} carried tensors, the init has {len(carry)}")
        ys, rebuild_ys = flatten(out[1], "scan")
        results = loop.close(new, ys)
    except BaseException:
        loop.discard()
        raise
    return rebuild_carry(results[: len(carry)]), rebuild_ys(results[len(carry) :])


class steps:  # noqa: N801 (used as `for t in gradfuse.steps(T)`, like `range`)
    """A Python `for` loop over `count` steps, traced once into a `tg.for`. Tensors
    carried from step to step are attributes (given as keywords); `collect` stacks
    tensors over the steps. See the module docstring."""

    def __init__(self, count: int, reverse: bool = False, **carried: Tensor):
        object.__setattr__(self, "_state", {"count": count, "reverse": reverse})
        object.__setattr__(self, "_values", dict(carried))
        object.__setattr__(self, "_collected", {})
        object.__setattr__(self, "_loop", None)

    def __iter__(self) -> Iterator[Step]:
        state, values = self._state, self._values
        if "done" in state or self._loop is not None:
            raise error("steps: a steps object runs once; make a new one for another loop")
        state["done"] = True
        for name, value in values.items():
            if not isinstance(value, Tensor):
                raise error(f"steps: carried value {name!r} must be a tensor")
        names = list(values)
        loop = TracedLoop("steps", state["count"], list(values.values()), state["reverse"])
        object.__setattr__(self, "_loop", loop)
        values.update(zip(names, loop.carried))
        try:
            yield loop.step
        except GeneratorExit:  # the body raised, or was left by break or return
            loop.discard()
            loop.prog.broken = (
                "gradfuse.steps: a traced loop was left before its end (break, return or an"
                " exception in its body), so it was removed; gradfuse.reset() starts anew"
            )
            raise
        finally:
            object.__setattr__(self, "_loop", None)
        collected = list(self._collected.items())
        try:
            results = loop.close(list(values.values()), [c for _, c in collected])
        except BaseException:
            loop.discard()
            raise
        values.update(zip(names, results[: len(names)]))
        values.update(zip([k for k, _ in collected], results[len(names) :]))

    def collect(self, **tensors: Tensor) -> None:
        """Stacks these tensors over the steps: after the loop, `loop.<name>` is [count, ...]."""
        if self._loop is None:
            raise error("steps.collect: call it inside the loop's body")
        for name in tensors:
            if name in self._values or name in self._collected:
                raise error(f"steps.collect: {name!r} is already a carried or collected name")
        self._collected.update(tensors)

    def __getattr__(self, name: str) -> Tensor:
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise AttributeError(f"steps has no carried or collected tensor {name!r}")
        return values[name]

    def __setattr__(self, name: str, value: Tensor) -> None:
        if name not in self._values or (name in self._collected):
            raise error(
                f"steps: {name!r} is not a carried tensor (give it as steps(..., {name}=init))"
            )
        if self._loop is None:
            raise error(f"steps: set {name!r} inside the loop's body")
        self._values[name] = value


__all__ = ["scan", "steps", "TracedLoop", "flatten"]
