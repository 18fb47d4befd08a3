"""`canonicalize`, `cse` and `dce`: xDSL's passes, with effects looked up once per op class.

xDSL's drivers ask every op they visit for its traits and memory effects, and a
loop's effects walk its whole body, every time; on a 20k-op training step that
is most of these passes' time. The passes here run the same drivers (same
worklists, patterns, folders and order, so the same output) and only answer
those questions from a table per op class, built anew on each run:

    effects(op)                 # = xdsl.traits.get_effects(op)
    is_trivially_dead(op)       # = xdsl.transforms.dead_code_elimination.is_trivially_dead(op)

An op class with effect traits other than the constant ones (no/read/write/alloc/
free effect) and the recursive one has those traits asked for each op, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.folder import Folder
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.post_order import PostOrderIterator
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriterListener,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.traits import (
    ConstantLike,
    EffectInstance,
    HasCanonicalizationPatternsTrait,
    HasFolder,
    IsolatedFromAbove,
    IsTerminator,
    MemoryAllocEffect,
    MemoryEffect,
    MemoryEffectKind,
    MemoryFreeEffect,
    MemoryReadEffect,
    MemoryWriteEffect,
    NoMemoryEffect,
    RecursiveMemoryEffect,
    SymbolOpInterface,
)
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import (
    CommonSubexpressionElimination,
    CSEDriver,
    KnownOps,
    OperationInfo,
)
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

Effects = AbstractSet[EffectInstance] | None

_CONSTANT = {
    cls.get_effects.__func__  # type: ignore[attr-defined]
    for cls in (
        NoMemoryEffect, MemoryReadEffect, MemoryWriteEffect, MemoryAllocEffect, MemoryFreeEffect,
    )
}  # fmt: skip
_RECURSIVE = RecursiveMemoryEffect.get_effects.__func__  # type: ignore[attr-defined]


class _ClassEffects:
    """The effect traits of one op class: constant effects (None: unknown), whether
    its regions' effects add to them, or the traits to ask each op (`dynamic`)."""

    def __init__(self, op: Operation):
        self.constant: frozenset[EffectInstance] | None = None
        self.recursive = False
        self.dynamic: tuple[MemoryEffect, ...] = ()
        traits = op.get_traits_of_type(MemoryEffect)
        if not traits:
            return
        constant: set[EffectInstance] = set()
        for trait in traits:
            func = getattr(type(trait).get_effects, "__func__", None)
            if func is _RECURSIVE:
                self.recursive = True
            elif func in _CONSTANT:
                constant.update(trait.get_effects(op))  # the same for every op
            else:
                self.dynamic = tuple(traits)
                return
        self.constant = frozenset(constant)


class OpFacts:
    """Per-class answers to the questions the drivers ask of each op."""

    def __init__(self) -> None:
        self._effects: dict[type[Operation], _ClassEffects] = {}
        self._dead: dict[type[Operation], bool] = {}  # classes whose answer is per class
        self._traits: dict[tuple[type[Operation], Any, bool], bool] = {}
        self._patterns: dict[type[Operation], tuple[RewritePattern, ...]] = {}

    def has(self, op: Operation, trait: Any, unregistered: bool = True) -> bool:
        """`op.has_trait(trait, value_if_unregistered=unregistered)`."""
        key = (type(op), trait, unregistered)
        found = self._traits.get(key)
        if found is None:
            found = self._traits[key] = op.has_trait(trait, value_if_unregistered=unregistered)
        return found

    def _class(self, op: Operation) -> _ClassEffects:
        entry = self._effects.get(type(op))
        if entry is None:
            entry = self._effects[type(op)] = _ClassEffects(op)
        return entry

    def effects(self, op: Operation) -> Effects:
        """The memory effects of `op`, as `xdsl.traits.get_effects` gives them."""
        entry = self._class(op)
        if entry.dynamic:
            out: set[EffectInstance] = set()
            for trait in entry.dynamic:
                found = trait.get_effects(op)
                if found is None:
                    return None
                out.update(found)
            return out
        if not entry.recursive or entry.constant is None:
            return entry.constant
        out = set(entry.constant)
        for region in op.regions:
            for block in region.blocks:
                for child in block.ops:
                    inner = self.effects(child)
                    if inner is None:
                        return None
                    out.update(inner)
        return out

    def all_effects(self, op: Operation, ok: Callable[[EffectInstance], bool]) -> bool:
        """Whether `effects(op)` is known and all `ok`; stops at the first that is not
        (a loop that writes in its first op needs no walk of the rest)."""
        entry = self._class(op)
        if entry.dynamic or not entry.recursive or entry.constant is None:
            effects = self.effects(op)
            return effects is not None and all(ok(e) for e in effects)
        if not all(ok(e) for e in entry.constant):
            return False
        for region in op.regions:
            for block in region.blocks:
                for child in block.ops:
                    if not self.all_effects(child, ok):
                        return False
        return True

    def would_be_trivially_dead(self, op: Operation) -> bool:
        """Whether `op` would be dead if its results were unused (xDSL's rule)."""
        dead = self._dead.get(type(op))
        if dead is not None:
            return dead

        def harmless(e: EffectInstance) -> bool:  # reads, or allocates what op defines
            if e.kind == MemoryEffectKind.READ:
                return True
            v = e.value
            return (
                e.kind == MemoryEffectKind.ALLOC
                and isinstance(v, SSAValue)
                and op.is_ancestor(v.owner)  # type: ignore[arg-type]
            )

        if self.has(op, IsTerminator, False) or self.has(op, SymbolOpInterface, False):
            dead = False
        else:
            dead = self.all_effects(op, harmless)
        entry = self._class(op)
        if not entry.dynamic and not entry.recursive:
            self._dead[type(op)] = dead  # no op of this class answers otherwise
        return dead

    def is_trivially_dead(self, op: Operation) -> bool:
        """Whether `op` has no used results and no observable effect."""
        for result in op.results:
            if result.first_use is not None:
                return False
        return self.would_be_trivially_dead(op)

    def canonicalization_patterns(self, op: Operation) -> tuple[RewritePattern, ...]:
        """The canonicalization patterns of `op`'s class (from its traits)."""
        cls = type(op)
        if cls not in self._patterns:
            traits = op.get_traits_of_type(HasCanonicalizationPatternsTrait)
            self._patterns[cls] = tuple(p for t in traits for p in t.get_patterns(cls))
        return self._patterns[cls]


def _op_type(pattern: RewritePattern) -> Any:
    """The op type (or union) that an `@op_type_rewrite_pattern` pattern matches, read from
    the decorator's closure; None (any op) for other patterns."""
    impl = type(pattern).match_and_rewrite
    code, cells = getattr(impl, "__code__", None), getattr(impl, "__closure__", None)
    if code is None or not cells or "expected_type" not in code.co_freevars:
        return None
    expected = cells[code.co_freevars.index("expected_type")].cell_contents
    try:
        issubclass(Operation, expected)  # a class or a union of classes
    except TypeError:
        return None
    return expected


class FactsApplier(GreedyRewritePatternApplier):
    """`GreedyRewritePatternApplier` asking `OpFacts` instead of each op, and trying on
    an op only the patterns that can match its class (the others do nothing)."""

    def __init__(self, patterns: list[RewritePattern], facts: OpFacts, **kwargs: Any):
        super().__init__(patterns, **kwargs)
        self.facts = facts
        self._types = [_op_type(p) for p in patterns]
        self._for_class: dict[type[Operation], list[RewritePattern]] = {}

    def patterns_for(self, op: Operation) -> list[RewritePattern]:
        """The patterns, in order, that may act on `op`."""
        found = self._for_class.get(type(op))
        if found is None:
            found = self._for_class[type(op)] = [
                p
                for p, t in zip(self.rewrite_patterns, self._types, strict=True)
                if t is None or issubclass(type(op), t)
            ]
        return found

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        facts = self.facts
        if self.dce_enabled and facts.is_trivially_dead(op):
            rewriter.erase(op)
            return
        if (
            self.folding_enabled
            and facts.has(op, HasFolder, False)
            and not facts.has(op, ConstantLike, True)
        ):
            if self.ctx is None:
                raise ValueError("Context is required for folding")
            folded = Folder(self.ctx).try_fold(op)
            if folded is not None:
                values, new_ops = folded
                rewriter.replace(op, new_ops=new_ops, new_results=values)
                return
        for pattern in self.patterns_for(op):
            pattern.match_and_rewrite(op, rewriter)
            if rewriter.has_done_action:
                return


def rewrite_walker(
    patterns: list[RewritePattern], facts: OpFacts | None = None, **kwargs: Any
) -> PatternRewriteWalker:
    """A `PatternRewriteWalker` over `patterns` whose dead-op checks use `facts`
    (what gradfuse's own rewrite passes run). `rewrite_walker(patterns, apply_recursively=False)`"""
    return PatternRewriteWalker(FactsApplier(patterns, facts or OpFacts()), **kwargs)


class _Canonicalization(RewritePattern):
    """Applies an op's canonicalization patterns (as xDSL's canonicalize does)."""

    def __init__(self, facts: OpFacts):
        self.facts = facts

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        # xDSL wraps several in a greedy applier, whose dead-op check the outer applier
        # has already made (the op is not dead), and which folds nothing
        for pattern in self.facts.canonicalization_patterns(op):
            pattern.match_and_rewrite(op, rewriter)
            if rewriter.has_done_action:
                return


class _Liveness:
    """xDSL's `LiveSet` (`dead_code_elimination.py`) asking `OpFacts`; ops by id."""

    def __init__(self, facts: OpFacts):
        self.facts = facts
        self.live: set[int] = set()
        self.changed = True

    def propagate_op(self, op: Operation) -> None:
        for region in op.regions:
            self.propagate_region(region)
        live, key = self.live, id(op)
        if key in live:
            return
        if self.facts.would_be_trivially_dead(op):  # live only if a live op uses it
            for result in op.results:
                for use in result.uses:
                    if id(use.operation) in live:
                        break
                else:
                    continue
                break
            else:
                return
        self.changed = True
        live.add(key)

    def propagate_region(self, region: Region) -> None:
        first = region.first_block
        if first is None:
            return
        for block in PostOrderIterator(first):
            for op in reversed(block.ops):  # uses before definitions: faster convergence
                self.propagate_op(op)

    def delete_dead(self, region: Region, listener: PatternRewriterListener | None) -> None:
        first = region.first_block
        if first is None:
            return
        live = self.live
        for block in reversed(region.blocks):
            if block != first and not any(id(op) in live for op in block.ops):
                self.changed = True
                region.erase_block(block, safe_erase=False)
                continue
            for op in reversed(block.ops):
                if id(op) not in live:
                    self.changed = True
                    if listener is not None:
                        listener.handle_operation_removal(op)
                    block.erase_op(op, safe_erase=False)
                else:
                    for inner in op.regions:
                        self.delete_dead(inner, listener)


def region_dce(
    region: Region, listener: PatternRewriterListener | None = None, facts: OpFacts | None = None
) -> bool:
    """Erases the ops of `region` that nothing live needs (xDSL's `region_dce`)."""
    live = _Liveness(facts or OpFacts())
    while live.changed:
        live.changed = False
        live.propagate_region(region)
    live.delete_dead(region, listener)
    return live.changed


def _is_read(effect: EffectInstance) -> bool:
    return effect.kind == MemoryEffectKind.READ


class _Info(OperationInfo):
    """An `OperationInfo` that hashes its op once: an op does not change while CSE looks
    it up and records it (xDSL's hashes it again at every lookup and comparison)."""

    def __init__(self, op: Operation):
        super().__init__(op)
        self.hash = OperationInfo.__hash__(self)

    def __hash__(self) -> int:
        return self.hash


class _KnownOps(KnownOps):
    """xDSL's `KnownOps` keyed by `_Info`."""

    def __getitem__(self, k: Operation) -> Operation:
        return self._known_ops[_Info(k)]

    def __setitem__(self, k: Operation, v: Operation) -> None:
        self._known_ops[_Info(k)] = v

    def __contains__(self, k: Operation) -> bool:
        return _Info(k) in self._known_ops

    def get(self, k: Operation, default: Any = None) -> Any:
        return self._known_ops.get(_Info(k), default)

    def pop(self, k: Operation) -> Operation:
        return self._known_ops.pop(_Info(k))

    def find(self, info: _Info) -> Operation | None:
        return self._known_ops.get(info)

    def record(self, info: _Info, op: Operation) -> None:
        self._known_ops[info] = op


class _CSEDriver(CSEDriver):
    facts: OpFacts
    _known_ops: _KnownOps

    def _simplify_operation(self, op: Operation) -> None:
        facts = self.facts
        if facts.has(op, IsTerminator):
            return
        if facts.is_trivially_dead(op):
            self._mark_erasure(op)
            return
        if any(len(region.blocks) > 1 for region in op.regions):
            return
        if not facts.all_effects(op, _is_read):  # unknown effects, or it writes
            return
        info = _Info(op)
        existing = self._known_ops.find(info)
        if facts.effects(op):  # it reads: no write may come between the two
            if (
                existing is not None
                and op.parent_block() is existing.parent_block()
                and not self._writes_between(existing, op)
            ):
                self._replace_and_delete(op, existing)
                return
            self._known_ops.record(info, op)
            return
        if existing is not None:
            self._replace_and_delete(op, existing)
            return
        self._known_ops.record(info, op)

    def _writes_between(self, start: Operation, end: Operation) -> bool:
        """Whether an op from `start` up to `end` may write memory."""
        op: Operation | None = start
        while op is not end:
            assert op is not None, "Incorrect order of ops in side-effect search"
            effects = self.facts.effects(op)
            if effects is None or any(e.kind is MemoryEffectKind.WRITE for e in effects):
                return True
            op = op.next_op
        return False

    def _simplify_region(self, region: Region) -> None:
        # as xDSL's, with a `_KnownOps` scope
        if len(region.blocks) == 1:
            old_scope = self._known_ops
            self._known_ops = _KnownOps(self._known_ops)
            self._simplify_block(region.block)
            self._known_ops = old_scope

    def _simplify_block(self, block: Block) -> None:
        # as xDSL's, with the isolation trait looked up per class
        for op in block.ops:
            if op.regions:
                if self.facts.has(op, IsolatedFromAbove, True):
                    old_scope = self._known_ops
                    self._known_ops = _KnownOps()
                    for region in op.regions:
                        self._simplify_region(region)
                    self._known_ops = old_scope
                else:
                    for region in op.regions:
                        self._simplify_region(region)
            self._simplify_operation(op)


class FastCanonicalizePass(CanonicalizePass):
    """xDSL's `canonicalize` (folding, canonicalization patterns, dead code), faster."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        facts = OpFacts()
        pattern = FactsApplier([_Canonicalization(facts)], facts, ctx=ctx, folding_enabled=True)

        def dce(region: Region, listener: PatternRewriterListener) -> bool:
            return region_dce(region, listener, facts)

        PatternRewriteWalker(pattern, post_walk_func=dce).rewrite_module(op)


class FastCSEPass(CommonSubexpressionElimination):
    """xDSL's `cse`, faster."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        driver = _CSEDriver(_known_ops=_KnownOps())
        driver.facts = OpFacts()
        driver.simplify(op)


class FastDCEPass(DeadCodeElimination):
    """xDSL's `dce`, faster."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        region_dce(op.body)
