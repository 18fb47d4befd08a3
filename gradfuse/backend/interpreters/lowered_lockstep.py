"""Runs one block of a kernel that has `gpu.barrier`s: its threads in lockstep.

The lowered interpreter runs a kernel thread by thread; a barrier means every thread
of the block reaches it before any goes on. So a block with barriers runs segment by
segment: every thread (each with its own values) up to the next barrier, then every
thread to the one after. A `scf.for` with a barrier inside runs one iteration at a
time for all threads, its trip count the same in each (as CUDA requires):

    scf.for %kc = %c0 to %chunks step %c1 iter_args(%acc = %zero) {
      memref.store %a, %tile[%r, %c]      // segment 1: every thread stages its element
      gpu.barrier
      ... reads of %tile ...              // segment 2: every thread reads them all
      gpu.barrier
      scf.yield %acc2
    }

Accesses before and after a barrier are ordered (`LoweredState.access`), so a missing
barrier shows up as a race.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdsl.dialects import gpu, scf
from xdsl.interpreter import Interpreter
from xdsl.ir import Operation
from xdsl.utils.scoped_dict import ScopedDict

from gradfuse.diagnostics import GradfuseError, position_of

if TYPE_CHECKING:
    from gradfuse.backend.interpreters.lowered_ops import LoweredState

Scope = ScopedDict[Any, Any]


def has_barrier(op: Operation) -> bool:
    """Whether a `gpu.barrier` stands anywhere inside `op` (or is `op`)."""
    return any(isinstance(o, gpu.BarrierOp) for o in op.walk())


class Lockstep:
    """The threads of one block, run segment by segment (see the module docstring)."""

    def __init__(self, interp: Interpreter, st: LoweredState, threads: list[tuple[int, ...]]):
        self.interp, self.st, self.threads = interp, st, threads
        self.first = st.thread

    def run(self, fn: gpu.FuncOp, args: tuple[Any, ...]) -> None:
        entry = fn.body.block
        outer = self.interp._ctx  # noqa: SLF001 (one scope per thread, swapped in here)
        scopes = []
        for _ in self.threads:
            scope: Scope = ScopedDict(parent=outer, name=fn.sym_name.data)
            for arg, value in zip(entry.args, args):
                scope[arg] = value
            scopes.append(scope)
        try:
            self.block(list(entry.ops), scopes)
        finally:
            self.interp._ctx = outer  # noqa: SLF001
        st = self.st
        st.thread, st.block, st.epoch = self.first + len(self.threads), st.block + 1, 0

    def block(self, ops: list[Operation], scopes: list[Scope]) -> None:
        """Runs `ops` (one block's, its terminator left out) in every thread's scope."""
        segment: list[Operation] = []
        for op in ops:
            if isinstance(op, gpu.BarrierOp):
                self.segment(segment, scopes)
                segment = []
                self.st.epoch += 1
            elif isinstance(op, scf.ForOp) and has_barrier(op):
                self.segment(segment, scopes)
                segment = []
                self.loop(op, scopes)
            elif has_barrier(op):
                raise GradfuseError(
                    f"{op.name}: a gpu.barrier inside it is not reached by every thread alike",
                    position_of(op.location),
                )
            else:
                segment.append(op)
        self.segment(segment, scopes)

    def enter(self, n: int, scope: Scope) -> None:
        (tz, ty, tx), st = self.threads[n], self.st
        st.thread_id, st.thread = (tx, ty, tz), self.first + n
        self.interp._ctx = scope  # noqa: SLF001

    def segment(self, ops: list[Operation], scopes: list[Scope]) -> None:
        interp = self.interp
        for n, scope in enumerate(scopes):
            self.enter(n, scope)
            for op in ops:
                result = interp._run_op(op, interp.get_values(op.operands))  # noqa: SLF001
                interp.set_values(zip(op.results, result.values))

    def loop(self, op: scf.ForOp, scopes: list[Scope]) -> None:
        """One iteration at a time for all threads, each carrying its own values."""
        bounds, carried = set(), []
        for n, scope in enumerate(scopes):
            self.enter(n, scope)
            bounds.add(tuple(self.interp.get_values([op.lb, op.ub, op.step])))
            carried.append(list(self.interp.get_values(op.iter_args)))
        if len(bounds) != 1:
            raise GradfuseError(
                "scf.for: a loop with a gpu.barrier inside must run as often in every thread",
                position_of(op.location),
            )
        lo, hi, step = bounds.pop()
        body = op.body.block
        ops = list(body.ops)
        y = ops.pop() if ops and isinstance(ops[-1], scf.YieldOp) else None
        for iv in range(lo, hi, step):
            inner: list[Scope] = []
            for values, scope in zip(carried, scopes):
                child: Scope = ScopedDict(parent=scope)
                for arg, value in zip(body.args, [iv, *values]):
                    child[arg] = value
                inner.append(child)
            self.block(ops, inner)
            if y is not None:
                carried = []
                for n, child in enumerate(inner):
                    self.enter(n, child)
                    carried.append(list(self.interp.get_values(y.operands)))
        for n, (values, scope) in enumerate(zip(carried, scopes)):
            self.enter(n, scope)
            self.interp.set_values(zip(op.results, values))
