"""Reference semantics of `tg.gather`, `tg.scatter_add` and `tg.random`.

x = np.arange(6.0).reshape(2, 3); idx = np.array([[2.0], [0.0]])
gather(x, idx, dim=1) == [[2.0], [3.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls

from gradfuse.backend.runner import RunState, dtype_of
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.dialects import tg
from gradfuse.philox import uniform


def positions(index: np.ndarray, dim: int, size: int, op: Any) -> tuple[np.ndarray, ...]:
    """The full index tuple of every element: its own position, with `dim` from `index`."""
    values = np.asarray(index)
    ints = np.rint(values).astype(np.int64)
    if values.size and (ints.min() < 0 or ints.max() >= size or np.any(ints != values)):
        raise GradfuseError(
            f"{op.name}: indices must be integers in [0, {size}) along dim {dim},"
            f" got values in [{values.min()}, {values.max()}]",
            position_of(op.location),
        )
    grid = list(np.indices(values.shape, dtype=np.int64))
    grid[dim] = ints
    return tuple(grid)


@register_impls
class SparseFunctions(InterpreterFunctions):
    """`@impl`s of the data-dependent and random tg ops."""

    def __init__(self, state: RunState):
        self.state = state

    def out(self, op: Any, value: Any) -> PythonValues:
        return (np.asarray(value, dtype=dtype_of(op.result.type, self.state.dtype)),)

    @impl(tg.GatherOp)
    def run_gather(self, interp: Interpreter, op: tg.GatherOp, args: PythonValues) -> PythonValues:
        x, index = np.asarray(args[0]), args[1]
        dim = op.dim.value.data
        return self.out(op, x[positions(index, dim, x.shape[dim], op)])

    @impl(tg.ScatterAddOp)
    def run_scatter_add(
        self, interp: Interpreter, op: tg.ScatterAddOp, args: PythonValues
    ) -> PythonValues:
        index, src = args
        shape = tuple(op.result.type.get_shape())  # type: ignore[attr-defined]
        dim = op.dim.value.data
        out = np.zeros(shape, dtype=dtype_of(op.result.type, self.state.dtype))
        np.add.at(out, positions(index, dim, shape[dim], op), np.asarray(src, dtype=out.dtype))
        return (out,)

    @impl(tg.RandomOp)
    def run_random(self, interp: Interpreter, op: tg.RandomOp, args: PythonValues) -> PythonValues:
        shape = tuple(op.result.type.get_shape())  # type: ignore[attr-defined]
        index = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        return self.out(op, uniform(index, float(args[0]), op.seed.value.data))
