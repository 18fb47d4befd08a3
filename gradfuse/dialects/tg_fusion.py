"""`tg.fusion`: the decisions of `tg-fuse` as IR, one region per future kernel.

As IREE's dispatch regions, a `tg.fusion` wraps the tg ops that one kernel will compute
and yields the values that the kernel stores (those read outside it); the ops inside
keep their tensor semantics. `convert-tg-to-kernel` turns each into a `kernel.kernel`
without deciding anything again. The kernel iterates over `domain` (the leading
`parallel` dims, then the reduction dims); each member op is evaluated at an affine map
from the domain (attribute `fuse.map`, the identity when absent) to its own indices.
A member marked `fuse.prologue` runs at every point of the whole domain (before the
reduction); others run once per point of the parallel dims. A reduction or contraction
(the root) carries `fuse.operand_maps`, the maps from the domain to its operands.
Fusions with the same `launch` number are adjacent and launched as one (horizontal
fusion). A `tg.constant` member is a fill: the kernel stores zeros, which a later
fusion's `tg.scatter_add` accumulates into (that fusion's `zeros` operands, one per
`tg.scatter_add` member, in order). Views (`tg.view`) inside a fusion are read through
by its members; a yielded view is stored laid out plainly, for a host op.

```
%h = "tg.fusion"() <{kind = "contraction", domain = array<i64: 2, 4, 8>, parallel = 2 : i64, launch = 1 : i64}> ({
  %y = "tg.dot"(%x, %w) {fuse.operand_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>]} : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %h = "tg.add"(%y, %b2) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  "tg.fusion_yield"(%h) : (tensor<2x4xf32>) -> ()
}) : () -> tensor<2x4xf32>
```
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    AffineMapAttr,
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsTerminator, Pure, RecursiveMemoryEffect

from gradfuse.dialects.tg_base import fail, i64_array, ints
from gradfuse.dialects.tg_data import ConstantOp, ViewAccessOp
from gradfuse.dialects.tg_sparse import ScatterAddOp

KINDS = ("elementwise", "reduction", "contraction")
MAP = "fuse.map"
PROLOGUE = "fuse.prologue"
OPERAND_MAPS = "fuse.operand_maps"
"""The discardable attributes of a member op (see the module's docstring)."""


@irdl_op_definition
class FusionYieldOp(IRDLOperation):
    """Ends a `tg.fusion`: the values its kernel stores.

    `"tg.fusion_yield"(%h, %dh) : (tensor<2x8xf32>, tensor<2x8xf32>) -> ()`
    """

    name = "tg.fusion_yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(FusionOp), Pure()))

    def __init__(self, values: Sequence[SSAValue] = ()):
        super().__init__(operands=[values])


@irdl_op_definition
class FusionOp(IRDLOperation):
    """The ops of one future kernel over `domain` (see the module's docstring).

    `%h = "tg.fusion"() <{kind = "elementwise", domain = array<i64: 4>, parallel = 1 : i64,
    launch = 0 : i64}> ({ ... "tg.fusion_yield"(%h) ... }) : () -> tensor<4xf32>`
    """

    name = "tg.fusion"
    kind = prop_def(StringAttr)
    domain = prop_def(DenseArrayBase)
    parallel = prop_def(IntegerAttr)
    launch = prop_def(IntegerAttr)
    zeros = var_operand_def(TensorType)
    outs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        kind: str,
        domain: Sequence[int],
        parallel: int,
        launch: int,
        body: Block,
        zeros: Sequence[SSAValue] = (),
    ):
        last = body.last_op
        assert isinstance(last, FusionYieldOp)
        super().__init__(
            operands=[zeros],
            result_types=[[v.type for v in last.values]],
            regions=[Region(body)],
            properties={
                "kind": StringAttr(kind),
                "domain": i64_array(domain),
                "parallel": IntegerAttr(parallel, i64),
                "launch": IntegerAttr(launch, i64),
            },
        )

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        return tuple(ints(self.domain))

    @property
    def terminator(self) -> FusionYieldOp:
        last = self.body.block.last_op
        assert isinstance(last, FusionYieldOp)
        return last

    def yielded(self, result: SSAValue) -> SSAValue:
        """The value inside that result `result` of this fusion is."""
        return self.terminator.values[self.outs.index(result)]  # type: ignore[arg-type]

    def members(self) -> list[Operation]:
        """The ops the kernel computes, in order (views and the terminator are not)."""
        return [
            op for op in self.body.block.ops if not isinstance(op, ViewAccessOp | FusionYieldOp)
        ]

    def member_maps(self, op: Operation) -> tuple[AffineMap, bool, tuple[AffineMap, ...] | None]:
        """A member's map, whether it is in the prologue, and a root's operand maps."""
        prologue = PROLOGUE in op.attributes
        domain, parallel = self.domain_sizes, self.parallel.value.data
        map = op.attributes.get(MAP)
        if map is None:
            n = len(domain) if prologue else parallel
            map = AffineMapAttr(AffineMap.identity(n))
        assert isinstance(map, AffineMapAttr)
        maps = op.attributes.get(OPERAND_MAPS)
        operand_maps = None
        if isinstance(maps, ArrayAttr):
            operand_maps = tuple(m.data for m in maps.data)  # type: ignore[attr-defined]
        return map.data, prologue, operand_maps

    def verify_(self) -> None:
        domain, parallel = self.domain_sizes, self.parallel.value.data
        if self.kind.data not in KINDS:
            raise fail(self, f"kind must be one of {', '.join(KINDS)}, got {self.kind.data}")
        if not 0 <= parallel <= len(domain):
            raise fail(self, f"parallel {parallel} is not within the domain's {len(domain)} dims")
        if not isinstance(self.body.block.last_op, FusionYieldOp):
            raise fail(self, "body must end with tg.fusion_yield")
        if [v.type for v in self.terminator.values] != [r.type for r in self.outs]:
            raise fail(self, "result types must equal the types of the yielded values")
        scatters = [op for op in self.body.block.ops if isinstance(op, ScatterAddOp)]
        if len(scatters) != len(self.zeros):
            raise fail(
                self,
                f"{len(scatters)} tg.scatter_add members need as many zeros operands,"
                f" got {len(self.zeros)}",
            )
        for op in self.members():
            self._verify_member(op, len(domain), parallel)

    def _verify_member(self, op: Operation, n: int, parallel: int) -> None:
        if isinstance(op, ConstantOp) and not op.is_splat:
            raise fail(self, "a tg.constant member (a fill) must be a splat")
        map, prologue, operand_maps = self.member_maps(op)
        if map.num_dims != (n if prologue else parallel):
            where = "the domain" if prologue else "the parallel dims"
            raise fail(
                self,
                f"{op.name}: {MAP} {map} must map {where} ({n if prologue else parallel} dims)",
            )
        for m in operand_maps or ():
            if m.num_dims != n:
                raise fail(self, f"{op.name}: {OPERAND_MAPS} {m} must map the domain ({n} dims)")


def annotate(
    op: Operation,
    map: AffineMap,
    prologue: bool,
    operand_maps: tuple[AffineMap, ...] | None,
    sizes: int,
) -> None:
    """Marks `op` as a member evaluated at `map` (see `FusionOp.member_maps`)."""
    if map != AffineMap.identity(sizes):
        op.attributes[MAP] = AffineMapAttr(map)
    if prologue:
        op.attributes[PROLOGUE] = UnitAttr()
    if operand_maps is not None:
        op.attributes[OPERAND_MAPS] = ArrayAttr([AffineMapAttr(m) for m in operand_maps])
