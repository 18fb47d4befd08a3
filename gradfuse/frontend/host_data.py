"""`HostData`: what `param.data` is, the parameter's host array (a NumPy view of it)
with PyTorch's in-place tensor methods, so that code written for `torch.Tensor.data`
runs as written:

    m.weight.data.normal_(0.0, 0.02)      # before the program: the host array, drawn now
    m.bias.data.fill_(0)
    m.weight.data[0] = 0.0                # (an index: as `x[key] = value`)
    p.data.add_(p.grad, alpha=-lr)        # a traced operand: tg.assign "w", %new
    w.data -= lr * w.grad                 # the same

An update is recorded, as `p.add_(...)` under `no_grad()` is (`tg.assign`, the
parameter read without a gradient), where an operand is a traced tensor, inside an
`ir_for` body, or once the program has read the parameter (so that it happens after
what came before, not to the initial value); otherwise it writes the host array now,
as `nn.init` does. A copy or slice of `.data` is a plain host array: updating it in
place with traced values is an error. Arithmetic on `.data` gives plain NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gradfuse.frontend.dtypes import element_for
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import error, ir_for_body, program, rng, set_grad_mode
from gradfuse.frontend.tensor import Tensor

if TYPE_CHECKING:
    from gradfuse.frontend.parameter import Parameter

Traced = Callable[[Tensor, list[Any]], Tensor]


class HostData(np.ndarray):
    """A parameter's host array, viewed: NumPy's array with PyTorch's in-place methods
    (`add_`, `sub_`, `mul_`, `div_`, `copy_`, `zero_`, `fill_`, `normal_`, `uniform_`,
    `clamp_`), each recorded or done now as the module docstring says."""

    owner: Parameter | None

    def __array_finalize__(self, obj: object) -> None:
        self.owner = None  # a copy, slice or view: plain host data

    def __array_wrap__(
        self, array: np.ndarray, context: Any = None, return_scalar: bool = False
    ) -> Any:
        """A ufunc's result is a plain array (or scalar); an in-place one is this array."""
        if array is self:
            return self
        plain = array.view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __reduce__(self) -> Any:
        """Pickled (`gradfuse.save`, `state_dict`) as a plain NumPy array."""
        return np.array(self, copy=True).__reduce__()

    # --- updates ---------------------------------------------------------------------------

    def _update(
        self, what: str, operands: list[Any], host: Callable[[], None], traced: Traced
    ) -> HostData:
        """`host()` now, or `traced(param, operands as tensors)` recorded and assigned."""
        owner = self.owner
        if not any(isinstance(x, Tensor) for x in operands) and (
            owner is None or not _recording(owner)
        ):
            host()
            return self
        if owner is None:
            raise error(
                f"data.{what}: a copy or slice of a parameter's .data is host memory and"
                " cannot take a traced value; update the whole parameter's .data"
            )
        old = set_grad_mode(False)
        try:
            values = [_traced(x) for x in operands]
            owner.assign(traced(Tensor(owner.value).detach(), values))
        finally:
            set_grad_mode(old)
        return self

    def add_(self, other: Any, alpha: float = 1.0) -> HostData:
        """`self += alpha * other`."""
        return self._update(
            "add_", [other], lambda: np.add(self, alpha * _host(other), out=self, casting="unsafe"),
            lambda p, v: p + v[0] * alpha,
        )  # fmt: skip

    def sub_(self, other: Any, alpha: float = 1.0) -> HostData:
        """`self -= alpha * other`."""
        return self._update(
            "sub_", [other], lambda: np.subtract(self, alpha * _host(other), out=self, casting="unsafe"),
            lambda p, v: p - v[0] * alpha,
        )  # fmt: skip

    def mul_(self, other: Any) -> HostData:
        """`self *= other`."""
        return self._update(
            "mul_", [other], lambda: np.multiply(self, _host(other), out=self, casting="unsafe"),
            lambda p, v: p * v[0],
        )  # fmt: skip

    def div_(self, other: Any) -> HostData:
        """`self /= other`."""
        return self._update(
            "div_", [other], lambda: np.divide(self, _host(other), out=self, casting="unsafe"),
            lambda p, v: p / v[0],
        )  # fmt: skip

    def copy_(self, src: Any) -> HostData:
        """`self[...] = src` (broadcast)."""
        return self._update(
            "copy_", [src], lambda: np.copyto(self, _host(src), casting="unsafe"),
            lambda p, v: _filled(p, v[0]),
        )  # fmt: skip

    def fill_(self, value: float) -> HostData:
        """Every element `value`."""
        return self.copy_(float(value))

    def zero_(self) -> HostData:
        """Every element 0."""
        return self.copy_(0.0)

    def clamp_(self, min: float | None = None, max: float | None = None) -> HostData:  # noqa: A002
        """Each element clamped to [min, max]."""
        return self._update(
            "clamp_", [], lambda: np.clip(self, min, max, out=self),
            lambda p, v: p.clamp(min, max),
        )  # fmt: skip

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> HostData:
        """Normal numbers of `mean` and `std`, from `gradfuse.manual_seed`'s generator now
        (in the program, an error naming `copy_(gradfuse.randn(...))`)."""
        return self._update(
            "normal_", [], lambda: np.copyto(self, rng().normal(mean, std, self.shape), casting="unsafe"),
            _no_draw("normal_"),
        )  # fmt: skip

    def uniform_(self, a: float = 0.0, b: float = 1.0, generator: Any = None) -> HostData:
        """Uniform numbers in [a, b)."""
        return self._update(
            "uniform_", [], lambda: np.copyto(self, rng().uniform(a, b, self.shape), casting="unsafe"),
            _no_draw("uniform_"),
        )  # fmt: skip

    def __setitem__(self, key: Any, value: Any) -> None:
        """`p.data[0] = t`, `p.data[mask] = 0.0`: recorded as `x[key] = value` is, or
        written now, as the methods decide."""
        if self.owner is None:
            return super().__setitem__(key, value)

        def traced(p: Tensor, v: list[Any]) -> Tensor:
            p[key] = v[0]
            return p

        self._update("__setitem__", [value], lambda: super(HostData, self).__setitem__(key, _host(value)), traced)  # fmt: skip

    def _operator(self, method: Callable[[Any], HostData], other: Any, plain: Any) -> Any:
        """`p.data -= x`: the method (recorded or not, as it decides); for a copy or slice
        of `.data`, NumPy's operator on its host memory (`plain`)."""
        if self.owner is None and not isinstance(other, Tensor):
            return plain(other)
        return method(other)

    def __iadd__(self, other: Any) -> Any:
        return self._operator(self.add_, other, super().__iadd__)

    def __isub__(self, other: Any) -> Any:
        return self._operator(self.sub_, other, super().__isub__)

    def __imul__(self, other: Any) -> Any:
        return self._operator(self.mul_, other, super().__imul__)

    def __itruediv__(self, other: Any) -> Any:
        return self._operator(self.div_, other, super().__itruediv__)


def _recording(owner: Parameter) -> bool:
    """Whether an update of `owner` belongs in the program: inside an `ir_for` body, or
    once the program has read it."""
    if ir_for_body() is not None:
        return True
    prog = program()
    key = prog.keys.get(id(owner))
    return key is not None and any(k[1] == key for k in prog.current)


def _host(x: Any) -> Any:
    """A host operand: a number or an array (a `Parameter`'s host array)."""
    host = getattr(x, "host", None)
    return host if isinstance(host, np.ndarray) else x


def _traced(x: Any) -> Any:
    """A recorded operand: a tensor, a number, or a host array (`.data` of a parameter:
    the parameter, read without a gradient; else a constant)."""
    if isinstance(x, Tensor):
        return x
    owner = getattr(x, "owner", None)
    if owner is not None:
        return Tensor(owner.value).detach()
    if isinstance(x, np.ndarray):
        array = np.asarray(x)
        return Tensor(B.dense(array, element_for(array.dtype)))
    return x


def _filled(like: Tensor, value: Any) -> Tensor:
    """`value` (a tensor that broadcasts, or a number) in `like`'s shape."""
    if isinstance(value, Tensor):
        return value if value.shape == like.shape else value.expand(list(like.shape))
    return like._new(B.const(float(value), like.value.type))


def _no_draw(what: str) -> Traced:
    """A recorded `normal_`/`uniform_`: an error naming what to write instead."""

    def fail(p: Tensor, v: list[Any]) -> Tensor:
        draw = "gradfuse.randn(p.shape) * std + mean" if what == "normal_" else "gradfuse.rand(p.shape) * (b - a) + a"  # fmt: skip
        raise error(
            f"data.{what}: a draw in the program (in an ir_for body, or after the program"
            f" read the parameter) is written `p.data.copy_({draw})`"
        )

    return fail
