"""The recording state of the tracing frontend: the current program and where ops go.

Every frontend call builds one tg op and hands it to `emit`, which gives it the
user's provenance (file:line of the first stack frame outside gradfuse, the path
of the running `Module`, the direction), inserts it at the current insertion
point (the end of `func.func @main` or of a `tg.for` body) and verifies it,
turning a verifier failure into a `GradfuseError` at the user's line:

    y = emit(tg.DotOp(x, w))     # mlp.py:12:5: error: tg.dot: inner dimensions differ ...
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType, FrameType
from typing import Any, Protocol, TypeVar

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import AnyFloat, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import VerifyException

from gradfuse.diagnostics import GradfuseError, Position, unique_name
from gradfuse.dialects import tg
from gradfuse.dialects.tg_builder import TgBuilder
from gradfuse.provenance import Provenance

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OpT = TypeVar("OpT", bound=Operation)
_NO_GRADIENT = (tg.StopGradientOp, tg.ConstantOp, tg.FeederOp, tg.RandomOp)


class Keyed(Protocol):
    """Something that names a param: `Parameter.key_hint()` gives its preferred key."""

    def key_hint(self) -> str: ...


@dataclass
class Program:
    """One recorded program: a module holding `func.func @main`, plus its host callbacks.

    `Program().block` is the body of `@main`, where recording starts.
    """

    module: ModuleOp = field(init=False)
    block: Block = field(init=False)
    feeders: dict[str, Callable[[], np.ndarray]] = field(default_factory=dict)
    receivers: dict[str, Callable[..., None]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    """Param key -> the `Parameter` object it belongs to."""
    keys: dict[int, str] = field(default_factory=dict)
    """id(Parameter) -> its key in this program."""
    current: dict[tuple[int, str], SSAValue] = field(default_factory=dict)
    """(id(block), key) -> the value a param has at the end of that block so far."""
    insertion: list[Block] = field(default_factory=list)
    module_paths: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=list)
    version: int = 0
    """Counts the changes to `module`: a compiled program is reused while it is unchanged."""
    compiled: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    """(backend, dtype, version) -> the `Compiled` of this program at that version."""
    freed: set[SSAValue] = field(default_factory=set)
    """Values of graphs that a `backward()` went through (without `retain_graph=True`)."""
    scan_loops: dict[int, Operation] = field(default_factory=dict)
    """id(body block) -> its `tg.for`, for the loops of `scan`/`steps` being traced:
    params read in them are read before the loop (so that gradients reach them)."""
    broken: str | None = None
    """Why recording cannot go on (a `steps` loop left by `break`), raised at the next op."""
    no_grad_values: set[SSAValue] = field(default_factory=set)
    """Results of ops recorded under `gradfuse.no_grad()`: no gradient flows through them."""
    accumulating: dict[int, dict[int, tuple[Any, Position | None]]] = field(default_factory=dict)
    """id(ir_for body) -> id(param) -> (param, where): the parameters whose first gradient
    in that body was taken without `.grad` cleared there (checked at the loop's end)."""
    detached: dict[tuple[SSAValue, int], SSAValue] = field(default_factory=dict)
    """(value, id(block)) -> its `tg.stop_gradient` there, made under `no_grad()`."""

    def __post_init__(self) -> None:
        body = Block()
        body.add_op(func.ReturnOp())
        self.module = ModuleOp([func.FuncOp("main", ((), ()), Region(body))])
        self.block = body
        self.insertion = [body]

    def forget(self, block: Block) -> None:
        """Drops the cached param values of `block` (stale once a loop over it ran)."""
        for key in [k for k in self.current if k[0] == id(block)]:
            del self.current[key]

    def is_empty(self) -> bool:
        """Whether nothing is recorded (`@main` holds only its `return`)."""
        return all(op.has_trait(IsTerminator) for op in self.block.ops)

    def key_of(self, param: Keyed) -> str:
        """The key of `param` in this program (its module path, made unique once)."""
        key = self.keys.get(id(param))
        if key is None:
            key = unique_name(param.key_hint(), self.params)
            self.keys[id(param)] = key
            self.params[key] = param
        return key


_program = Program()
_rng: np.random.Generator = np.random.default_rng()
_grad_enabled = True


def program() -> Program:
    """The program being recorded now."""
    return _program


def new_program() -> Program:
    """Discards the recorded program and starts an empty one."""
    global _program
    _program = Program()
    return _program


def manual_seed(seed: int) -> None:
    """Seeds the generator that initialises parameters. `gradfuse.manual_seed(0)`"""
    global _rng
    _rng = np.random.default_rng(seed)


def rng() -> np.random.Generator:
    """The generator seeded by `manual_seed` (parameter initialisation draws from it)."""
    return _rng


# --- provenance ---------------------------------------------------------------------


def user_frame() -> FrameType | None:
    """The innermost stack frame outside the gradfuse package (the user's line)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _in_package(name if os.path.isabs(name) else os.path.abspath(name)):
            return frame
        frame = frame.f_back
    return None


def user_position() -> Position | None:
    """File, line and column of the user's line, with its source text."""
    frame = user_frame()
    if frame is None:
        return None
    import linecache

    file = frame.f_code.co_filename
    line = frame.f_lineno or 0
    column = 1
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if 0 <= index < len(positions):
        start_line, _, start_col, _ = positions[index]
        if start_line == line and start_col is not None:
            column = start_col + 1
    source = linecache.getline(file, line) or None
    return Position(_shown(file, os.getcwd()), line, column, source)


# Each recorded op asks for the user's position, so what it derives from a code object
# or a file name is kept: a list of the function's positions, an abspath per frame and a
# relpath took a third of recording (py-spy over the unit tests: 17.8 s of `emit`'s 46.6).


@lru_cache(maxsize=4096)
def _in_package(file: str) -> bool:
    """Whether the absolute path `file` is in the gradfuse package."""
    return os.path.normpath(file).startswith(_PACKAGE_DIR + os.sep)


@lru_cache(maxsize=1024)
def _positions(code: CodeType) -> tuple[tuple[int | None, ...], ...]:
    """`code.co_positions()`, one (line, end line, column, end column) per instruction."""
    return tuple(code.co_positions())


@lru_cache(maxsize=1024)
def _shown(file: str, cwd: str) -> str:
    """`file` as a position names it: relative to `cwd` when below it, else as given."""
    rel = os.path.relpath(file, cwd)
    return file if rel.startswith("..") else rel


def provenance() -> Provenance:
    """The provenance of an op recorded now."""
    pos = user_position()
    prog = _program
    path = prog.module_paths[-1] if prog.module_paths and prog.module_paths[-1] else None
    direction = prog.directions[-1] if prog.directions else "forward"
    if pos is None:
        return Provenance(None, 0, 0, path, direction)
    return Provenance(pos.file, pos.line, pos.column, path, direction)


@contextmanager
def _pushed(stack: str, item: Any) -> Iterator[None]:
    """`item` on top of the list `stack` of the program being recorded, while inside."""
    getattr(_program, stack).append(item)
    try:
        yield
    finally:
        getattr(_program, stack).pop()


def module_scope(path: str) -> AbstractContextManager[None]:
    """Ops recorded inside belong to the module at `path` (`"0"`, `"encoder.linear1"`)."""
    return _pushed("module_paths", path)


def direction_scope(direction: str) -> AbstractContextManager[None]:
    """Ops recorded inside have `direction` ("forward", "backward", "optimizer")."""
    return _pushed("directions", direction)


# --- insertion ------------------------------------------------------------------------


def insertion_block() -> Block:
    """The block new ops are appended to (before its terminator)."""
    return _program.insertion[-1]


def insert_into(block: Block) -> AbstractContextManager[None]:
    """Records into `block` (a `tg.for` body) while inside."""
    return _pushed("insertion", block)


def traced_loops() -> list[Operation]:
    """The `scan`/`steps` loops being traced around the insertion point, outermost first
    (each is the last op of its parent block while its body is traced)."""
    loops, block = [], insertion_block()
    while block is not None and id(block) in _program.scan_loops:
        loops.append(_program.scan_loops[id(block)])
        block = loops[-1].parent_block()
    return loops[::-1]


def changed() -> None:
    """Notes that the recorded program changed (an op was removed outside `emit`)."""
    _program.version += 1


def within(block: Block | None, outer: Block) -> bool:
    """Whether `block` is `outer` or nested in it."""
    while block is not None:
        if block is outer:
            return True
        parent = block.parent_op()
        block = parent.parent_block() if parent is not None else None
    return False


def defined_in(value: SSAValue) -> Block | None:
    """The block that defines `value` (a block argument's, or its op's)."""
    owner = value.owner
    return owner if isinstance(owner, Block) else owner.parent_block()


def ir_for_body() -> Block | None:
    """The body of the innermost `ir_for` loop around the insertion point (not a
    `scan`/`steps` loop's)."""
    block: Block | None = insertion_block()
    while block is not None:
        parent = block.parent_op()
        if isinstance(parent, tg.ForOp) and id(block) not in _program.scan_loops:
            return block
        block = parent.parent_block() if parent is not None else None
    return None


def is_visible(value: SSAValue, block: Block | None = None) -> bool:
    """Whether `value` may be used in `block` (defined there or in an enclosing block)."""
    return within(block or insertion_block(), defined_in(value))  # type: ignore[arg-type]


def is_grad_enabled() -> bool:
    """Whether ops recorded now carry gradients (False inside `gradfuse.no_grad()`)."""
    return _grad_enabled


def set_grad_mode(enabled: bool) -> bool:
    """Turns gradients of the ops recorded from now on on or off; returns the old mode."""
    global _grad_enabled
    old, _grad_enabled = _grad_enabled, bool(enabled)
    return old


def carries_gradient(value: SSAValue) -> bool:
    """Whether a gradient can flow through `value`: float tensors only (not masks)."""
    ty = value.type
    return not isinstance(ty, TensorType) or isinstance(ty.element_type, AnyFloat)


def _no_gradient(value: SSAValue) -> bool:
    """Whether no gradient can flow through `value` anyway: recorded under `no_grad()`,
    detached, a constant, a feeder's input, random numbers or a mask."""
    if value in _program.no_grad_values or not carries_gradient(value):
        return True
    return isinstance(value.owner, _NO_GRADIENT)


def _detach_operands(op: Operation, block: Block) -> None:
    """Under `no_grad()`: each operand through which a gradient could flow is replaced by
    its `tg.stop_gradient` (one per value and block), so that no gradient reaches
    what it was computed from, as PyTorch records no graph there."""
    for i, value in enumerate(op.operands):
        if _no_gradient(value):
            continue
        key = (value, id(block))
        cut = _program.detached.get(key)
        if cut is None:
            stop = tg.StopGradientOp(value)
            stop.location = provenance().to_location()
            block.insert_op_before(stop, op)
            cut = _program.detached[key] = stop.result
        op.operands[i] = cut


def error(message: str) -> GradfuseError:
    """A `GradfuseError` at the user's line."""
    return GradfuseError(message, user_position())


def emit(op: OpT) -> OpT:
    """Records `op` at the insertion point with the user's provenance and verifies it.

    `emit(tg.AddOp(a, b))` appends `%z = tg.add %a, %b` and returns the op.
    """
    if _program.broken is not None:
        raise error(_program.broken)
    block = insertion_block()
    for value in op.operands:
        if not is_visible(value, block):
            raise error(
                f"{op.name}: uses a tensor computed inside an ir_for body outside of it"
                " (or from a program discarded by execute()/reset())"
            ) from None
    op.location = provenance().to_location()
    _program.version += 1
    last = block.last_op
    if last is not None and last.has_trait(IsTerminator):
        block.insert_op_before(op, last)
    else:
        block.add_op(op)
    if not _grad_enabled and op.operands and not isinstance(op, tg.StopGradientOp):
        _detach_operands(op, block)  # (a param read, with no operands, is not cut)
        _program.no_grad_values.update(op.results)
    try:
        op.verify(verify_nested_ops=False)
    except VerifyException as err:
        op.detach()
        op.erase()
        raise error(str(err)) from None
    return op


def emit_before(anchor: Operation, op: OpT) -> OpT:
    """Records `op` just before `anchor` (a loop being traced), with the user's
    provenance: a param read hoisted out of a `scan` body."""
    op.location = provenance().to_location()
    _program.version += 1
    block = anchor.parent_block()
    assert block is not None
    block.insert_op_before(op, anchor)
    return op


@dataclass(frozen=True)
class Step:
    """The step of a `scan`/`steps` loop being traced: `x[t]` is slot t of `x` (on its
    first dim, or where `t` stands in the key). `counter` holds the step number as a
    `tensor<1xf32>`, carried by the loop."""

    counter: SSAValue
    count: int

    def __index__(self) -> int:
        raise error(
            "a gradfuse.steps/scan step is symbolic (the loop is traced once): index a"
            " tensor with it (x[t]), not a Python sequence"
        )


RECORDING = TgBuilder(emit, error)
"""The frontend's builder: records each op at the user's line and verifies it
(`RECORDING.add(x, 1.0)` records `tg.constant 1.0` and `tg.add`)."""
