"""`Module`, the base of every layer: parameters, children, state dicts, provenance.

Names and layouts follow PyTorch, so state dicts move between the two:

    model = Sequential(Linear(4, 8), Sigmoid(), Linear(8, 2))
    sorted(model.state_dict())   # ['0.bias', '0.weight', '2.bias', '2.weight']
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.parameter import Parameter
from gradfuse.frontend.recorder import module_scope


class Module:
    """Base class of layers: assign `Parameter`s and `Module`s as attributes, write `forward`.

    `class Scale(Module): def forward(self, x): return x * self.s` with
    `self.s = Parameter(np.ones(3, np.float32))` set in `__init__`.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_name", "")
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.__init__ must call super().__init__() first"
            )
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
            if value._hint is None:
                value._hint = _hint_of(self, name)
        elif isinstance(value, Module):
            self._modules[name] = value
            if value._parent is None and value is not self:
                object.__setattr__(value, "_parent", self)
                object.__setattr__(value, "_name", name)
        object.__setattr__(self, name, value)

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
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """Every parameter once, with its PyTorch name: `("0.weight", p)`."""
        seen: set[int] = set()
        for mod_name, mod in self.named_modules(prefix):
            for name, p in mod._parameters.items():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self) -> list[Parameter]:
        """Every parameter once, in definition order."""
        return [p for _, p in self.named_parameters()]

    # --- state -------------------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameter values by PyTorch name (Linear weight is [out, in])."""
        return {name: p.data.copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Sets parameter values from `state` (NumPy arrays, torch tensors or anything
        `np.asarray` takes), cast to each parameter's dtype.

        Every entry is checked (keys when `strict`, shapes, numeric data) before any is
        written: on an error the model is unchanged. `model.load_state_dict(saved)`
        """
        params = dict(self.named_parameters())
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
            elif arr.shape != p.data.shape:
                problems.append(
                    f"{name} has shape {list(arr.shape)} in the state dict and"
                    f" {list(p.data.shape)} in the model"
                )
            else:
                arrays[name] = arr.astype(p.data.dtype)
        if problems:
            raise GradfuseError(f"load_state_dict: {'; '.join(problems)} (nothing was loaded)")
        for name, arr in arrays.items():
            params[name].data = arr

    def zero_grad(self) -> None:
        """Forgets the gradients (records nothing)."""
        for p in self.parameters():
            p.grad = None

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
        for name, p in new._parameters.items():
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


def _hint_of(module: Module, name: str) -> Any:
    """The key hint of parameter `name` of `module`: its dotted path, looked up when used."""
    return lambda: module.qualified(name)
