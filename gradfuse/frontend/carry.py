"""Python state that an `ir_for` body carries from one iteration to the next.

The body is traced once, so a variable it reads and then sets again would, without
this, be read at its value from before the loop in every iteration. PyTorch's
truncated-BPTT idiom (word_language_model) does exactly that:

    hidden = model.init_hidden(batch)          # before the loop
    def step():
        nonlocal hidden
        hidden = repackage_hidden(hidden)      # read: the last iteration's state
        output, hidden = model(data, hidden)   # set for the next iteration

`ir_for` looks at the slots the body can reach (its closure, its module's globals, the
attributes of the modules and objects among them) before and after tracing. A slot
whose tensors the body read and then replaced with tensors it computed is carried: its
state becomes a param (`"carry.hidden.0"`) assigned before the loop, read where the
body read the old tensor, and assigned at the body's end; after the loop the slot holds
that param, so code after it reads the last iteration's state. A tensor the body
updates in place (`total += loss`) is carried alike, and every name for it then reads
the state:

    tg.assign "carry.hidden.0" %h0
    tg.for %i = 0 to 10 step 1 {
      %h = tg.param "carry.hidden.0" ...  (the body's uses of %h0)
      tg.assign "carry.hidden.0" %h_next
    }

No gradient flows from one iteration into the previous one (PyTorch's `backward()`
would refuse to go through a freed graph there; the idiom detaches the state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.ir import Block, SSAValue

from gradfuse.diagnostics import GradfuseError
from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.frontend.dtypes import element_for
from gradfuse.frontend.eager import host_value
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import defined_in, emit_before, error, program, within
from gradfuse.frontend.tensor import Tensor


class Carried(Parameter):
    """The state of a carried slot: a param that is never trained."""

    __slots__ = ()
    TRAINABLE = False


@dataclass
class Slot:
    """A place in Python that holds a value: a closure cell, a global, an attribute."""

    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]


@dataclass
class Held:
    """What a slot held before the body was traced: the object and its tensors."""

    slot: Slot
    value: Any
    tensors: list[Tensor]
    values: list[SSAValue | None]  # each tensor's own value (None: a param's, read anew)


def _leaves(value: Any) -> list[Tensor] | None:
    """The tensors of a tensor or a (nested) tuple or list of them; None if it holds
    anything else."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, tuple | list) and value:
        out: list[Tensor] = []
        for v in value:
            sub = _leaves(v)
            if sub is None:
                return None
            out += sub
        return out
    return None


def _rebuilt(value: Any, leaves: Iterator[Tensor]) -> Any:
    """`value` with its tensors replaced by `leaves`, in order."""
    if isinstance(value, Tensor):
        return next(leaves)
    return type(value)(_rebuilt(v, leaves) for v in value)


def _attribute_slots(obj: Any, name: str, seen: set[int]) -> Iterator[Slot]:
    """The attributes of `obj` (an object with a `__dict__`) and of the modules in them."""
    if id(obj) in seen or not hasattr(obj, "__dict__") or isinstance(obj, type):
        return
    seen.add(id(obj))
    for attr, value in list(vars(obj).items()):
        yield Slot(f"{name}.{attr}", lambda o=obj, a=attr: vars(o)[a], lambda v, o=obj, a=attr: setattr(o, a, v))  # fmt: skip
        if hasattr(value, "named_children"):  # a Module: its submodules' attributes too
            yield from _attribute_slots(value, f"{name}.{attr}", seen)
    for child_name, child in getattr(obj, "named_children", lambda: [])():
        yield from _attribute_slots(child, f"{name}.{child_name}", seen)


def slots(fn: Callable[..., Any]) -> list[Slot]:
    """The slots `fn` can reach: its closure cells, its module's globals, and the
    attributes of the modules (and a bound method's object) among them."""
    out: list[Slot] = []
    owner = getattr(fn, "__self__", None)
    fn = getattr(fn, "__func__", fn)
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    roots: list[tuple[str, Any]] = [("self", owner)] if owner is not None else []
    for name, cell in zip(code.co_freevars if code else (), cells, strict=False):
        out.append(Slot(name, lambda c=cell: c.cell_contents, lambda v, c=cell: setattr(c, "cell_contents", v)))  # fmt: skip
        try:
            roots.append((name, cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    names = getattr(fn, "__globals__", {})
    for name, value in list(names.items()):
        if not name.startswith("__"):
            out.append(Slot(name, lambda g=names, n=name: g[n], lambda v, g=names, n=name: g.__setitem__(n, v)))  # fmt: skip
            roots.append((name, value))
    seen: set[int] = set()
    for name, value in roots:
        if hasattr(value, "named_children") or (name == "self" and value is owner):
            out.extend(_attribute_slots(value, name, seen))
    return out


def held(fn: Callable[..., Any]) -> list[Held]:
    """What the slots of `fn` hold now (before its body is traced), with their tensors
    (empty for a value that is not a tensor or a sequence of them, and for one holding
    a parameter, which is read afresh in every iteration)."""
    out = []
    for slot in slots(fn):
        try:
            value = slot.get()
        except (KeyError, ValueError):
            continue
        tensors = _leaves(value)
        if tensors is not None and any(
            isinstance(t, Parameter) and not isinstance(t, Carried) for t in tensors
        ):
            continue
        tensors = tensors or []
        out.append(Held(slot, value, tensors, [_own_value(t) for t in tensors]))
    return out


def _own_value(t: Tensor) -> SSAValue | None:
    """The value a plain tensor holds (`x += 1` changes it in place); None for a
    parameter or a leaf, whose reads are recorded anew in each block."""
    return None if isinstance(t, Parameter) or t._leaf is not None else t._value


def hoist(before: list[Held], loop: tg.ForOp) -> None:
    """A slot that held no tensor before the loop and holds tensors the body computed
    alike in every iteration (a mask a module caches on its first call) holds them as
    constants after the loop, so that code after it can use them (as PyTorch's cached
    tensor); other tensors of the body stay the body's (an error where used after)."""
    for h in before:
        if h.tensors:
            continue
        try:
            now = h.slot.get()
        except (KeyError, ValueError):
            continue
        new = _leaves(now) if now is not h.value else None
        if not new or not all(_inside(t.value, loop) for t in new):
            continue
        try:
            values = [host_value(t.value, h.slot.name, loop) for t in new]
        except GradfuseError:
            continue
        constants = [Tensor(B.dense(v, element_for(v.dtype))) for v in values]
        h.slot.set(_rebuilt(now, iter(constants)))


def restore(before: list[Held]) -> None:
    """Sets the slots of `before` back to what they held (after a failed trace)."""
    for h in before:
        for t, v in zip(h.tensors, h.values, strict=True):
            if v is not None:
                t._value = v  # (an update in place)
        try:
            if h.slot.get() is h.value:
                continue
        except (KeyError, ValueError):
            pass
        h.slot.set(h.value)


def _inside(value: SSAValue, loop: tg.ForOp) -> bool:
    """Whether `value` is computed in the body of `loop` (at any depth)."""
    return within(defined_in(value), loop.body.block)


def carry(before: list[Held], loop: tg.ForOp) -> None:
    """Carries each slot of `before` that the body of `loop` read and replaced (see the
    module's docstring). Every slot is checked before any is changed: a slot whose
    tensors the body read and replaced with another kind of value is an error."""
    plans = []
    for h in before:
        if not h.tensors:
            continue
        try:
            now = h.slot.get()
        except (KeyError, ValueError):
            continue
        moved = [v is not None and t._value is not v for t, v in zip(h.tensors, h.values, strict=True)]  # fmt: skip
        if now is h.value and not any(moved):
            continue
        olds = [Tensor(v) if m and v is not None else t for t, v, m in zip(h.tensors, h.values, moved, strict=True)]  # fmt: skip
        read = [
            t for t in olds
            if isinstance(t, Carried) or any(loop.is_ancestor(u.operation) for u in t.value.uses)
        ]  # fmt: skip
        if not read:
            continue
        new = _leaves(now)
        if new is None or len(new) != len(olds):
            raise error(
                f"ir_for: the loop body reads `{h.slot.name}` and sets it to another kind of"
                " value, which the next iteration would read: keep the same tensors (shapes)"
                " in it, or keep the state in a gradfuse.nn.Buffer and assign it"
            )
        pairs = list(zip(olds, new, strict=True))
        for old, t in pairs:
            _check(h.slot.name, old, t, loop)
        plans.append((h.slot, now, pairs, moved))
    for slot, now, pairs, moved in plans:
        states = [_carried(slot.name, i, old, t, loop) for i, (old, t) in enumerate(pairs)]
        slot.set(_rebuilt(now, iter(states)))
        for (_, t), state, in_place in zip(pairs, states, moved, strict=True):
            if in_place and state is not t:
                t._leaf = state  # (updated in place: other names for it read the state too)


def check_gradients(loop: tg.ForOp) -> None:
    """An error for a parameter whose gradient the body of `loop` left for the next
    iteration to add to (`note_gradient`): gradfuse does not carry `.grad` across
    iterations, and PyTorch would accumulate it."""
    noted = program().accumulating.pop(id(loop.body.block), {})
    if loop.trip_count <= 1:
        return  # no next iteration to add to
    for param, where in noted.values():
        g = param.grad
        if g is None or not _inside(g.value, loop):
            continue
        owner = g.value.owner
        if isinstance(owner, tg.ConstantOp) and owner.is_splat and owner.value.value.data == 0:
            continue  # zeroed in place (`p.grad.zero_()`)
        raise GradfuseError(
            f"ir_for: the gradient of '{param.key}' is not cleared in the loop body, so PyTorch"
            " would add each iteration's to the last one's, which gradfuse does not carry"
            " across iterations: call optimizer.zero_grad() (or model.zero_grad()) in the"
            " body, before backward() or after the step",
            where,
        )


def _check(name: str, old: Tensor, new: Tensor, loop: tg.ForOp) -> None:
    """An error unless `old` (before the loop) can be carried as `new` (the body's)."""
    if new is old or not _inside(new.value, loop):
        return
    if new.shape != old.shape or new.dtype != old.dtype:
        raise error(
            f"ir_for: the loop body reads `{name}` (shape {list(old.shape)}, {old.dtype}) and"
            f" sets it to shape {list(new.shape)}, {new.dtype} for the next iteration: a"
            " carried state keeps its shape and dtype"
        )
    owner = new.value.owner
    if (owner if isinstance(owner, Block) else owner.parent_block()) is not loop.body.block:
        raise error(
            f"ir_for: `{name}` is set, for the next iteration, to a tensor computed in a"
            " nested loop: carry it out of that loop first"
        )


def _carried(name: str, i: int, old: Tensor, new: Tensor, loop: tg.ForOp) -> Tensor:
    """The state of one tensor of a carried slot (`old` before the loop, `new` at the end
    of the body): a `Carried` param, or `new` itself where it is not the body's."""
    if new is old or not _inside(new.value, loop):
        return new
    body, prog = loop.body.block, program()
    state = old if isinstance(old, Carried) else Carried(np.zeros(old.shape, old.dtype))
    if not isinstance(old, Carried):
        state._hint = lambda: f"carry.{name}.{i}"
        key = prog.key_of(state)
        ty = tensor(old.shape, element_for(old.dtype))
        read = emit_before(body.first_op, tg.ParamOp(key, ty))  # type: ignore[arg-type]
        for use in list(old.value.uses):
            if use.operation is not read and loop.is_ancestor(use.operation):
                use.operation.operands[use.index] = read.result
        emit_before(loop, tg.AssignOp(key, old.value))
    emit_before(body.last_op, tg.AssignOp(prog.key_of(state), new.value))  # type: ignore[arg-type]
    return state
