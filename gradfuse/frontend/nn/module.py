"""`Module`, the base of every layer: parameters, buffers, children, state dicts, provenance.

Names and layouts follow PyTorch, so state dicts move between the two: parameters
are what optimizers train, buffers (BatchNorm's running statistics) are state
that is saved and loaded but never trained, and `state_dict()` holds both:

    model = Sequential(Linear(4, 8), BatchNorm1d(8), Linear(8, 2))
    len(model.parameters())      # 6: the weights and biases
    list(model.state_dict())[2:5]  # ['1.weight', '1.bias', '1.running_mean']
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.dtypes import dtype_named
from gradfuse.frontend.eager import host_value
from gradfuse.frontend.nn.buffer import Buffer
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import error, module_scope
from gradfuse.frontend.tensor import Tensor


class Parameters(list[Parameter]):
    """A list of parameters that `next()` also walks, as the generator PyTorch's
    `parameters()` returns: `next(model.parameters())` is the first one."""

    def __next__(self) -> Parameter:
        at = self.__dict__.get("at", 0)
        if at >= len(self):
            raise StopIteration
        self.at = at + 1
        return self[at]


class Module:
    """Base class of layers: assign `Parameter`s and `Module`s as attributes, write `forward`.

    `class Scale(Module): def forward(self, x): return x * self.s` with
    `self.s = Parameter(np.ones(3, np.float32))` set in `__init__`.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_name", "")
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.__init__ must call super().__init__() first"
            )
        if name in self._buffers and not isinstance(value, Parameter | Module):
            if value is not None:  # PyTorch: assigning to a buffer's name keeps it a buffer
                value = _as_buffer(name, value)
                value._hint = value._hint or _hint_of(self, name)
            self._buffers[name] = value
            object.__setattr__(self, name, value)
            return
        kinds = ((Buffer, self._buffers), (Parameter, self._parameters), (Module, self._modules))
        home = next((store for kind, store in kinds if isinstance(value, kind)), None)
        for _, store in kinds:
            if store is not home:
                store.pop(name, None)
        if home is not None:  # a replaced entry keeps its place, as in PyTorch
            home[name] = value
        if isinstance(value, Module):
            if value._parent is None and value is not self:
                object.__setattr__(value, "_parent", self)
                object.__setattr__(value, "_name", name)
        if isinstance(value, Parameter) and value._hint is None:
            value._hint = _hint_of(self, name)
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        """Adds state that is saved and loaded but not trained (PyTorch's `register_buffer`).

        `tensor` is an array (NumPy, torch or a nested list), a `Buffer`, or None (a slot
        that `state_dict()` skips until set); `persistent=False` leaves it out of
        `state_dict()`. `self.register_buffer("mask", np.tril(np.ones((4, 4), np.float32)))`
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.__init__ must call super().__init__() first"
            )
        if not isinstance(name, str) or not name or "." in name:
            raise error(
                f"register_buffer: the name must be a non-empty string without '.', got {name!r}"
            )
        if hasattr(self, name) and name not in self._buffers:
            raise error(f"register_buffer: attribute {name!r} already exists")
        buffer = None if tensor is None else _as_buffer(name, tensor)
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = buffer
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)
        if buffer is not None and buffer._hint is None:
            buffer._hint = _hint_of(self, name)
        object.__setattr__(self, name, buffer)

    # --- names -------------------------------------------------------------------------

    def path(self) -> str:
        """The dotted path from the outermost module ("" for it): `"encoder.layers.1"`."""
        if self._parent is None:
            return ""
        parent = self._parent.path()
        return f"{parent}.{self._name}" if parent else self._name

    def qualified(self, name: str) -> str:
        """`name` prefixed by this module's path: `"0.weight"`."""
        path = self.path()
        return f"{path}.{name}" if path else name

    # --- traversal ---------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct submodules with their attribute names."""
        yield from self._modules.items()

    def children(self) -> Iterator[Module]:
        """The direct submodules."""
        yield from self._modules.values()

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and all below it, with dotted names ("" for this one)."""
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        """This module and all below it."""
        yield from (m for _, m in self.named_modules())

    def _named(
        self, table: str, prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple[str, Any]]:
        """The entries of `_parameters` or `_buffers` here (and below with `recurse`)."""
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mod_name, mod in mods:
            for name, p in getattr(mod, table).items():
                if p is None or (remove_duplicate and id(p) in seen):
                    continue
                seen.add(id(p))
                yield (f"{mod_name}.{name}" if mod_name else name), p

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """Every trainable parameter once, with its PyTorch name: `("0.weight", p)`.

        Buffers (BatchNorm's running statistics) are not parameters, as in PyTorch.
        """
        yield from self._named("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Parameters:
        """Every trainable parameter once, in definition order (no buffers): a list that
        `next()` also walks, as PyTorch's generator.

        `SGD(model.parameters(), lr=0.1)`, `weight = next(self.parameters())`
        """
        return Parameters(p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Buffer]]:
        """Every buffer once, with its PyTorch name: `("1.running_mean", b)`."""
        yield from self._named("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> list[Buffer]:
        """Every buffer once, in definition order. `[b.shape for b in bn.buffers()]`"""
        return [b for _, b in self.named_buffers(recurse=recurse)]

    # --- state -------------------------------------------------------------------------

    def _state_entries(self) -> Iterator[tuple[str, Parameter]]:
        """What `state_dict()` holds, in PyTorch's order: each module's parameters, then
        its persistent buffers, then its children's, depth first."""
        for mod_name, mod in self.named_modules():
            prefix = f"{mod_name}." if mod_name else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    yield prefix + name, p
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent_buffers_set:
                    yield prefix + name, b

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameter and persistent buffer values by PyTorch name, in
        PyTorch's order (Linear weight is [out, in])."""
        return {name: p.host.copy() for name, p in self._state_entries()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Sets parameter and buffer values from `state` (NumPy arrays, torch tensors or
        anything `np.asarray` takes), cast to each one's dtype.

        Every entry is checked (keys when `strict`, shapes, numeric data) before any is
        written: on an error the model is unchanged. `model.load_state_dict(saved)`
        """
        params = dict(self._state_entries())
        if strict:
            missing = sorted(set(params) - set(state))
            unexpected = sorted(set(state) - set(params))
            if missing or unexpected:
                raise GradfuseError(
                    f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}"
                    " (strict=False loads the keys that match)"
                )
        arrays: dict[str, np.ndarray] = {}
        problems: list[str] = []
        for name, value in state.items():
            if name not in params:
                continue
            p = params[name]
            arr = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
            if arr.dtype.kind not in "biuf":
                problems.append(f"{name} holds {arr.dtype} data, not numbers")
            elif arr.shape != p.host.shape:
                problems.append(
                    f"{name} has shape {list(arr.shape)} in the state dict and"
                    f" {list(p.host.shape)} in the model"
                )
            else:
                arrays[name] = arr.astype(p.host.dtype)
        if problems:
            raise GradfuseError(f"load_state_dict: {'; '.join(problems)} (nothing was loaded)")
        for name, arr in arrays.items():
            params[name].host = arr

    def zero_grad(self) -> None:
        """Forgets the gradients (records nothing)."""
        for p in self.parameters():
            p.grad = None

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """`fn` on every submodule, then on this one (`model.apply(init_weights)`)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freezes (False) or unfreezes every parameter; returns self."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """The parameters and buffers in the dtype named (`model.to(gradfuse.float64)`);
        a device (`model.to("cuda")`, `model.to(device)`) changes nothing, since
        `execute()` chooses where the whole program runs. Returns self."""
        dtype = dtype_named(args, kwargs)
        if dtype is not None:
            for _, p in self._state_entries():
                p.host = p.host.astype(dtype)
        return self

    def cuda(self, device: Any = None) -> Module:
        """Self: `execute()` chooses where the program runs."""
        return self

    cpu = cuda

    def double(self) -> Module:
        """The parameters and buffers in float64."""
        return self.to(np.float64)

    def float(self) -> Module:
        """The parameters and buffers in float32."""
        return self.to(np.float32)

    def half(self) -> Module:
        """The parameters and buffers in float16."""
        return self.to(np.float16)

    def train(self, mode: bool = True) -> Module:
        """Sets training mode here and below (`Dropout` is active only in it); returns self."""
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """Sets evaluation mode (`Dropout` records nothing); returns self. `model.eval()`"""
        return self.train(False)

    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        """An independent copy (new parameters) named as a root until it is assigned somewhere.

        `copy.deepcopy(layer)` is how `TransformerEncoder` makes its `layers.0`, `layers.1`.
        """
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            copied = None if name == "_parent" else copy.deepcopy(value, memo)
            object.__setattr__(new, name, "" if name == "_name" else copied)
        for name, child in new._modules.items():
            object.__setattr__(child, "_parent", new)
            object.__setattr__(child, "_name", name)
        for table in (new._parameters, new._buffers):
            for name, p in table.items():
                if p is not None:
                    p._hint = _hint_of(new, name)
        return new

    # --- calling -----------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with module_scope(self.path()):
                return self.forward(*args, **kwargs)
        except GradfuseError as err:  # the message names the user's line: keep the trace short
            raise err.with_traceback(None) from None

    def extra_repr(self) -> str:
        """Extra text in the repr."""
        return ""

    def __repr__(self) -> str:
        inner = "".join(
            f"\n  ({name}): " + repr(child).replace("\n", "\n  ")
            for name, child in self.named_children()
        )
        return f"{type(self).__name__}({self.extra_repr()}{inner}{chr(10) if inner else ''})"


def _as_buffer(name: str, value: Any) -> Buffer:
    """`value` as a `Buffer`: itself, or one holding a copy of its host data (a traced
    tensor's computed now, when it depends on constants only)."""
    if isinstance(value, Buffer):
        return value
    if isinstance(value, Parameter):
        return Buffer(value.host.copy())
    if isinstance(value, Tensor):  # computed from constants (a positional table): its value
        return Buffer(host_value(value.value, f"register_buffer: buffer {name!r} needs host data"))
    arr = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
    if arr.dtype.kind not in "biuf":
        raise error(f"register_buffer: buffer {name!r} holds {arr.dtype} data, not numbers")
    return Buffer(arr if arr.dtype.kind == "f" else arr.astype(np.float32))


def _hint_of(module: Module, name: str) -> Any:
    """The key hint of parameter `name` of `module`: its dotted path, looked up when used."""
    return lambda: module.qualified(name)
