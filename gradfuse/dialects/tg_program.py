"""tg program ops: persistent params, host feeders/receivers, loops and grad."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    StringAttr,
    TensorType,
    f64,
)
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import (
    EffectInstance,
    HasParent,
    IsTerminator,
    MemoryEffect,
    MemoryEffectKind,
    MemoryWriteEffect,
    Pure,
    RecursiveMemoryEffect,
)

from gradfuse.diagnostics import quote
from gradfuse.dialects.tg_base import CountedLoop, TgOp, shape_of


class ParamEffects(MemoryEffect):
    """A param read reads state; one that carries `init` also declares it, so it is
    never removed or merged (DCE and CSE keep the initial value)."""

    @classmethod
    def get_effects(cls, op: Operation) -> AbstractSet[EffectInstance]:
        if isinstance(op, ParamOp) and op.init is not None:
            return {EffectInstance(MemoryEffectKind.READ), EffectInstance(MemoryEffectKind.WRITE)}
        return {EffectInstance(MemoryEffectKind.READ)}


@irdl_op_definition
class ParamOp(TgOp):
    """Reads the current value of a named persistent parameter.

    The first `tg.param` of a name may give its initial value (`init`, a splat or
    a dense attribute); all reads of one name agree on its type.

    `%w = tg.param "fc1.weight" init=0.5 : tensor<255x255xf32>`
    """

    name = "tg.param"
    key = prop_def(StringAttr)
    init = opt_prop_def(FloatAttr | DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(ParamEffects())

    def __init__(
        self, key: str, type: TensorType, init: float | DenseIntOrFPElementsAttr | None = None
    ):
        props: dict = {"key": StringAttr(key)}
        if init is not None:
            props["init"] = (
                init if isinstance(init, DenseIntOrFPElementsAttr) else FloatAttr(init, f64)
            )
        super().__init__(result_types=[type], properties=props)

    def verify_(self) -> None:
        if isinstance(self.init, DenseIntOrFPElementsAttr):
            self.expect_shape("init shape", tuple(self.init.get_shape()), shape_of(self.result))
        if isinstance(self.init, FloatAttr):
            self.expect_splat("init", self.init.value.data, self.result.type)
        other = find_param(self, self.key.data, default=self)
        if other is not None and other.result.type != self.result.type:
            raise self.fail(
                f"param {quote(self.key.data)} is read with two types:"
                f" {other.result.type} and {self.result.type}"
            )


@irdl_op_definition
class AssignOp(TgOp):
    """Overwrites a named parameter in place. `tg.assign "fc1.weight", %w2`"""

    name = "tg.assign"
    key = prop_def(StringAttr)
    value = operand_def(TensorType)
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, key: str, value: SSAValue):
        super().__init__(operands=[value], properties={"key": StringAttr(key)})

    def verify_(self) -> None:
        param = find_param(self, self.key.data)
        if param is None:
            raise self.fail(
                f"there is no tg.param {quote(self.key.data)} to assign to"
                " (a param is declared by reading it with tg.param)"
            )
        if param.result.type != self.value.type:
            raise self.fail(
                f"value type {self.value.type} differs from the type of param"
                f" {quote(self.key.data)}: {param.result.type}"
            )


def find_param(op: Operation, key: str, default: ParamOp | None = None) -> ParamOp | None:
    """A `tg.param` of `key` in the program around `op` (its outermost op, or all ops of
    the outermost block when that block is not in an op yet, as while the parser builds
    a function body): the first one, or the one found before; where none is known,
    `default` (then known for `key`) if given, else None. All reads of one key have one
    type, so any one of them stands for the key.

    The params found are kept (weakly) per program and checked on use, still in it and
    of `key`: the recorder verifies each op it emits, and a walk of the whole program
    per `tg.param` and `tg.assign` made tracing quadratic (ResNet-18: 858 walks). A
    program is walked when first seen, and again when a `tg.assign`'s key is not known.

        find_param(assign, "fc1.weight")  # %w = tg.param "fc1.weight" ...
    """
    scope = _scope(op)
    known = _KNOWN.get(scope)
    param = _live(known, key, scope) if known is not None else None
    if param is not None:
        return param
    if default is None or known is None:  # a program not seen yet: all its params
        known = _KNOWN[scope] = {}
        tops = list(scope.ops) if isinstance(scope, Block) else [scope]
        for inner in (inner for top in tops for inner in top.walk()):
            if isinstance(inner, ParamOp):
                known.setdefault(inner.key.data, weakref.ref(inner))
        param = _live(known, key, scope)
    if param is None and default is not None:
        known[key] = weakref.ref(default)
        return default
    return param


def _live(
    known: dict[str, weakref.ref[ParamOp]], key: str, scope: Operation | Block
) -> ParamOp | None:
    """The param of `key` that `known` holds, if it is still of `key` and in `scope`."""
    ref = known.get(key)
    param = ref() if ref is not None else None
    return param if param is not None and param.key.data == key and _scope(param) is scope else None


def _scope(op: Operation) -> Operation | Block:
    """The program `op` is in: its outermost op, or the block that op is in."""
    root = op
    while (parent := root.parent_op()) is not None:
        root = parent
    return root.parent if root.parent is not None else root


_KNOWN: weakref.WeakKeyDictionary[Operation | Block, dict[str, weakref.ref[ParamOp]]] = (
    weakref.WeakKeyDictionary()
)
"""Per program, a `tg.param` of each key (`find_param`)."""


@irdl_op_definition
class FeederOp(TgOp):
    """Host -> device input: calls the host callback `key` each time it runs.

    `%x = tg.feeder "images" : tensor<2x255xf32>`
    """

    name = "tg.feeder"
    key = prop_def(StringAttr)
    result = result_def(TensorType)
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, key: str, type: TensorType):
        super().__init__(result_types=[type], properties={"key": StringAttr(key)})


@irdl_op_definition
class ReceiverOp(TgOp):
    """Device -> host output: hands its operands to the host callback `key`.

    `tg.receiver "saving params", %w, %b`
    """

    name = "tg.receiver"
    key = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, key: str, inputs: Sequence[SSAValue]):
        super().__init__(operands=[inputs], properties={"key": StringAttr(key)})


@irdl_op_definition
class YieldOp(TgOp):
    """Ends a `tg.for` body, giving the next values of the loop-carried tensors.

    `tg.yield %w2` (the body's new value of its one carried tensor)
    """

    name = "tg.yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(ForOp), Pure()))

    def __init__(self, values: Sequence[SSAValue] = ()):
        super().__init__(operands=[values])


@irdl_op_definition
class ForOp(TgOp, CountedLoop):
    """Counted loop `lower <= i < upper` by `step`, with loop-carried tensors.

    The body's block arguments are the induction variable (`index`) and the
    carried values; it ends with `tg.yield`.

    ```
    %r = tg.for %i = 0 to 1000 step 1 iter(%a = %x) : tensor<4xf32> {
      %b = tg.add %a, %a : tensor<4xf32>
      tg.yield %b
    }
    ```
    """

    name = "tg.for"
    inits = var_operand_def(TensorType)
    results_ = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        lower: int,
        upper: int,
        step: int,
        inits: Sequence[SSAValue],
        body: Region | None = None,
    ):
        if body is None:
            body = Region(Block(arg_types=[IndexType(), *[v.type for v in inits]]))
        super().__init__(
            operands=[inits],
            result_types=[[v.type for v in inits]],
            regions=[body],
            properties=self.bound_properties(lower, upper, step),
        )

    def verify_(self) -> None:
        self.verify_step()
        block = self.body.block
        want = [IndexType(), *[v.type for v in self.inits]]
        got = [a.type for a in block.args]
        if got != want:
            raise self.fail(
                "body arguments must be the induction variable (index) and one per carried"
                f" value ({len(self.inits)}), got {len(got)}"
            )
        if [r.type for r in self.results_] != want[1:]:
            raise self.fail("result types must equal the carried value types")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise self.fail("body must end with tg.yield")
        if [v.type for v in term.values] != want[1:]:
            raise self.fail(
                f"tg.yield gives {len(term.values)} values; the loop carries {len(self.inits)}"
                " (types must match the carried values)"
            )


def extend_loop(
    loop: ForOp,
    inits: Sequence[SSAValue],
    nexts: Callable[[Sequence[BlockArgument]], Sequence[SSAValue]],
) -> ForOp:
    """`loop` rebuilt to carry `inits` too; `nexts(args)` builds the next values of the
    new body arguments `args` (inserting before the body's yield). The new loop takes
    `loop`'s place (its first results replace `loop`'s), and `loop` is erased:

        %r = tg.for ... iter(%a = %x) { ...; tg.yield %b }
        // extend_loop(loop, [%s0], lambda args: [<%s + 1>]):
        %r, %s = tg.for ... iter(%a = %x, %t = %s0) { ...; tg.yield %b, %t1 }
    """
    body = loop.detach_region(loop.body)
    block = body.block
    args = [block.insert_arg(v.type, len(block.args)) for v in inits]
    old_yield = block.last_op
    assert isinstance(old_yield, YieldOp)
    new_yield = YieldOp([*old_yield.values, *nexts(args)])
    new_yield.location = old_yield.location
    Rewriter.replace_op(old_yield, new_yield)
    new = ForOp(*loop.bounds, [*loop.inits, *inits], body)
    new.location = loop.location
    Rewriter.insert_op(new, InsertPoint.before(loop))
    for old, res in zip(loop.results, new.results):
        old.replace_all_uses_with(res)
    Rewriter.erase_op(loop)
    return new


def operands_within(op: Operation) -> Iterable[SSAValue]:
    """The operands of `op` and of every op nested in its regions."""
    return (v for inner in op.walk() for v in inner.operands)


def drop_carried(loop: ForOp, j: int) -> ForOp:
    """`loop` rebuilt without its carried value `j`, whose result nobody reads and whose
    body argument only its next value reads (that op is erased). The new loop takes
    `loop`'s place; `loop` is erased."""
    body = loop.detach_region(loop.body)
    block = body.block
    old_yield = block.last_op
    assert isinstance(old_yield, YieldOp)
    nxt = old_yield.values[j]
    new_yield = YieldOp([v for k, v in enumerate(old_yield.values) if k != j])
    new_yield.location = old_yield.location
    Rewriter.replace_op(old_yield, new_yield)
    if isinstance(nxt.owner, Operation) and nxt.owner.parent is block and not nxt.uses:
        Rewriter.erase_op(nxt.owner)
    block.erase_arg(block.args[j + 1])
    new = ForOp(*loop.bounds, [v for k, v in enumerate(loop.inits) if k != j], body)
    new.location = loop.location
    Rewriter.insert_op(new, InsertPoint.before(loop))
    for k, old in enumerate(loop.results):
        if k != j:
            old.replace_all_uses_with(new.results[k - (k > j)])
    Rewriter.erase_op(loop)
    return new


@irdl_op_definition
class GradOp(TgOp):
    """d(sum of `output`)/d(`wrt`...): one result per `wrt`, of its type.

    Removed by `tg-autodiff`. `%gw, %gb = tg.grad %loss wrt %w, %b : tensor<4x4xf32>, tensor<4xf32>`
    """

    name = "tg.grad"
    output = operand_def(TensorType)
    wrt = var_operand_def(TensorType)
    grads = var_result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, output: SSAValue, wrt: Sequence[SSAValue]):
        super().__init__(operands=[output, wrt], result_types=[[v.type for v in wrt]])

    def verify_(self) -> None:
        if not self.wrt:
            raise self.fail("needs at least one value to differentiate with respect to")
        for g, v in zip(self.grads, self.wrt):
            if g.type != v.type:
                raise self.fail(
                    f"gradient type {g.type} differs from the type of its input {v.type}"
                )


__all__ = [
    "ParamOp",
    "AssignOp",
    "FeederOp",
    "ReceiverOp",
    "ForOp",
    "YieldOp",
    "GradOp",
    "extend_loop",
]
