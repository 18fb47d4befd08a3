"""`Parameter`: a named persistent tensor whose reads record `tg.param`.

w = Parameter(np.zeros((4, 4), np.float32), name="w")
w.data.normal_()     # its host array, drawn now (host_data.py)
y = x @ w            # %w = tg.param "w" : tensor<4x4xf32> (once per block)
w.assign(w - 0.1)    # tg.assign "w", %new
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import tensor
from gradfuse.frontend.dtypes import element_for
from gradfuse.frontend.eager import host_value
from gradfuse.frontend.host_data import HostData
from gradfuse.frontend.recorder import (
    defined_in,
    emit,
    emit_before,
    error,
    insertion_block,
    ir_for_body,
    is_grad_enabled,
    program,
    traced_loops,
    user_position,
    within,
)
from gradfuse.frontend.tensor import Tensor

Reducer = Callable[[list[tuple["Parameter", Tensor]]], list[tuple["Parameter", Tensor]]]
"""What `backward()` hands each parameter's gradient to before `.grad` gets it
(`DistributedDataParallel.reduce`): the (param, gradient) pairs of one backward, each
gradient the new one added to what `.grad` held (as PyTorch's DDP reduces `.grad`)."""


class Parameter(Tensor):
    """A named persistent tensor: its host value is `host` (`data` views it with
    PyTorch's in-place methods); reading it records `tg.param`.

    `w = Parameter(np.zeros((4, 4), np.float32), name="w"); y = x @ w` records
    `%w = tg.param "w"` at the point of first use in each block.
    """

    __slots__ = ("host", "_grad", "cleared_in", "name", "_hint", "_reducer", "_trainable")
    TRAINABLE = True
    """Whether a new one requires grad (a `Buffer`'s never does)."""

    def __init__(self, data: np.ndarray | Sequence[float] | Tensor, name: str | None = None):
        if isinstance(data, Tensor):  # `nn.Parameter(gradfuse.randn(784, 10) / 28)`
            data = host_value(data.value, "Parameter(tensor)")
        arr = np.array(data)
        if arr.dtype.kind != "f":
            arr = arr.astype(np.float32)
        self.host: np.ndarray = arr  # its value before the program (after execute(): after)
        self._grad: Tensor | None = None
        self.cleared_in: Block | None = None  # where `.grad` was last set to None
        self._trainable = self.TRAINABLE
        self.name = name
        self._hint: Callable[[], str] | None = None
        self._reducer: Reducer | None = None  # (DistributedDataParallel's: averages over ranks)

    def key_hint(self) -> str:
        """The key this parameter would like: its module path (`0.weight`), else its name."""
        if self._hint is not None:
            return self._hint()
        return self.name or "param"

    @property
    def key(self) -> str:
        """Its key in the current program (unique there)."""
        return program().key_of(self)

    @property
    def value(self) -> SSAValue:
        """The current value in the current block: records `tg.param` at first use."""
        prog = program()
        key = prog.key_of(self)
        block = insertion_block()
        current = prog.current.get((id(block), key))
        if current is None:
            ty = tensor(self.host.shape, element_for(self.host.dtype))
            loops = traced_loops()
            if not loops:
                current = emit(tg.ParamOp(key, ty)).result
            else:  # read before the outermost scan loop, so that gradients reach the param
                outer = loops[0].parent_block()
                assert outer is not None
                current = prog.current.get((id(outer), key))
                if current is None:
                    current = emit_before(loops[0], tg.ParamOp(key, ty)).result
                    prog.current[(id(outer), key)] = current
            prog.current[(id(block), key)] = current
        return current

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.host.shape)

    @property
    def data(self) -> HostData:
        """The host array, as PyTorch's `.data`: NumPy's array with PyTorch's in-place
        methods (`m.weight.data.normal_(0.0, 0.02)`, `p.data.add_(p.grad, alpha=-lr)`,
        recorded where they must be: `host_data.py`)."""
        view = self.host.view(HostData)
        view.owner = self
        return view

    @data.setter
    def data(self, value: object) -> None:
        """`p.data = t`: a traced tensor is assigned (recorded), an array replaces the
        host value (cast to its dtype where numbers)."""
        if isinstance(value, HostData) and value.owner is self:
            return  # `p.data -= t`: Python assigns what __isub__ returned
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            if value.shape != self.shape:
                raise error(f"data: a value of shape {list(value.shape)} for a parameter of shape {list(self.shape)}")  # fmt: skip
            self.data.copy_(value)
            return
        arr = np.asarray(value.host if isinstance(value, Parameter) else value)
        self.host = arr if arr.dtype.kind == "f" else arr.astype(self.host.dtype)

    @property
    def grad(self) -> Tensor | None:
        """The gradient the last `backward()`s gave it (None after `zero_grad()`; always
        None where `requires_grad` is False)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is None:
            self.cleared_in = insertion_block()
        elif self.requires_grad:
            self._note_gradient()
        self._grad = value if self.requires_grad else None

    def _note_gradient(self) -> None:
        """(Before `.grad` gets a gradient.) In an `ir_for` body, its first gradient there,
        unless `.grad` was cleared (`zero_grad()`) in that body before, is noted: PyTorch
        would add it to the last iteration's, which `ir_for` makes an error unless `.grad`
        is cleared by the body's end (`carry.check_gradients`)."""
        body = ir_for_body()
        if body is None or within(self.cleared_in, body):
            return
        old = self._grad
        if old is not None and within(defined_in(old.value), body):
            return  # not the first in this iteration
        noted = program().accumulating.setdefault(id(body), {})
        noted.setdefault(id(self), (self, user_position()))

    @property
    def dtype(self) -> np.dtype:
        return self.host.dtype

    def assign(self, new: Tensor) -> None:
        """Records `tg.assign` of `new` to this parameter; later reads see `new`, through
        which no gradient flows back (as PyTorch's in-place updates under `no_grad`: a
        gradient taken after an optimizer step does not reach what computed the step)."""
        if new.shape != self.shape:
            raise error(
                f'tg.assign "{self.key}": value of shape {list(new.shape)}, param is {list(self.shape)}'
            )
        prog = program()
        block: Block | None = insertion_block()
        while block is not None:  # a scan/steps body reads params once, before the loop
            if id(block) in prog.scan_loops:
                raise error(
                    f'tg.assign "{self.key}": a gradfuse.scan/steps body cannot assign a'
                    " param (it reads params once, before the loop); assign after the loop,"
                    " or carry the value through the loop"
                )
            parent = block.parent_op()
            block = parent.parent_block() if parent is not None else None
        emit(tg.AssignOp(prog.key_of(self), new.value))
        held = new.value
        owner = held.owner
        if (
            isinstance(owner, Operation)
            and owner.operands
            and not isinstance(owner, tg.StopGradientOp)
        ):
            held = emit(tg.StopGradientOp(held)).result  # a computed value: a new leaf
        prog.current[(id(insertion_block()), prog.key_of(self))] = held

    @property
    def requires_grad(self) -> bool:
        """Whether `backward()` gives it a gradient (a `Buffer`'s never); settable, as in
        PyTorch, to freeze a parameter: `p.requires_grad = False` (optimizers skip it)."""
        return self._trainable

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not self.TRAINABLE:
            raise error(f"requires_grad: a {type(self).__name__} is never trained")
        self._trainable = bool(value)
        if not value:
            self._grad = None

    def requires_grad_(self, requires_grad: bool = True) -> Parameter:
        """Sets `requires_grad`; returns the parameter."""
        self.requires_grad = requires_grad
        return self

    def _set(self, new: Tensor, what: str) -> None:
        """An in-place update (`p -= lr * p.grad`, `p.add_(...)`) assigns the new value;
        as in PyTorch, a trainable parameter only under `gradfuse.no_grad()`."""
        if self.requires_grad and is_grad_enabled():
            raise error(
                f"{what}: a Parameter that requires grad is updated in place while gradients"
                " are recorded; update it under `with gradfuse.no_grad():` (as PyTorch requires)"
            )
        self.assign(new)

    def __iadd__(self, other: object) -> Parameter:
        return self.add_(other)  # type: ignore[arg-type,return-value]

    def __isub__(self, other: object) -> Parameter:
        return self.sub_(other)  # type: ignore[arg-type,return-value]

    def __imul__(self, other: object) -> Parameter:
        return self.mul_(other)  # type: ignore[arg-type,return-value]

    def __itruediv__(self, other: object) -> Parameter:
        return self.div_(other)  # type: ignore[arg-type,return-value]

    def item(self) -> float:
        """The host value of a one-element parameter (after `execute()`, its trained value)."""
        if self.host.size != 1:
            raise error(f"item(): the parameter has {self.host.size} elements, not one")
        return float(self.host.reshape(()))

    def __deepcopy__(self, memo: dict[int, object]) -> Parameter:
        """A new parameter with a copy of the data, no gradient and no key yet."""
        new = Parameter(self.host.copy(), self.name)
        new._trainable = self._trainable
        memo[id(self)] = new
        return new

    def numpy(self) -> np.ndarray:
        """A copy of the host value."""
        return self.host.copy()

    def __repr__(self) -> str:
        return f"Parameter({self.key_hint()!r}, shape={list(self.shape)}, dtype={self.dtype})"


Tensor.LEAF = Parameter  # `tensor.requires_grad_()` makes one of its host value
