"""Answers to the questions xDSL's rewrite drivers ask of every op, once per op class.

xDSL's drivers ask each op they visit for its traits and memory effects, and a
loop's effects walk its whole body, every time; on a 20k-op training step that
is most of the time of `canonicalize`, `cse` and `dce`. `OpFacts` answers from a
table per op class (built anew for each pass run) and gives the same answers:

    facts.effects(op)            # = xdsl.traits.get_effects(op)
    facts.is_trivially_dead(op)  # = xdsl.transforms.dead_code_elimination.is_trivially_dead(op)

An op class with effect traits other than the constant ones (no/read/write/alloc/
free effect) and the recursive one has those traits asked for each op, as before.
`FactsApplier` is xDSL's greedy pattern applier asking `OpFacts`; gradfuse's own
rewrite passes walk with it (`rewrite_walker`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from itertools import chain
from typing import Any

from xdsl.folder import Folder
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.traits import (
    ConstantLike,
    EffectInstance,
    HasCanonicalizationPatternsTrait,
    HasFolder,
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
            parts: Iterable[Effects] = (trait.get_effects(op) for trait in entry.dynamic)
        elif not entry.recursive or entry.constant is None:
            return entry.constant
        else:  # its own effects and those of every op inside, in order
            children = (c for region in op.regions for block in region.blocks for c in block.ops)
            parts = chain([entry.constant], map(self.effects, children))
        out: set[EffectInstance] = set()
        for part in parts:
            if part is None:  # unknown: stop at the first
                return None
            out.update(part)
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
