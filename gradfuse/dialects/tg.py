"""The `tg` ("tensor graph") dialect: value-semantic tensors, loops and state.

Ops live in files by family and are all re-exported here: `tg_elementwise`
(arithmetic, with `SEMANTICS`, the table of what each op means), `tg_compute`
(masks, composites, dot, reductions), `tg_data` (constants and movement), `tg_conv`,
`tg_sparse`, `tg_program` (params, feeders, receivers, loops, grad), `tg_collective`
(all-reduce over the ranks of a data-parallel run) and `tg_fusion`
(`tg-fuse`'s decisions: one region per future kernel). `TG` is
every op of those files, so a new op is registered by being defined there.

    %w = tg.param "fc.weight" : tensor<4x4xf32>
    %y = tg.dot %x, %w : tensor<2x4xf32>
"""

from types import ModuleType

from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation

from gradfuse.dialects import (
    tg_collective,
    tg_compute,
    tg_conv,
    tg_data,
    tg_elementwise,
    tg_fusion,
    tg_program,
    tg_sparse,
)
from gradfuse.dialects.tg_base import (  # noqa: F401 (re-exported)
    FLOAT_TYPES,
    TgCanonicalize,
    fmt_shape,
    parse_type,
    shape_of,
    tensor,
)
from gradfuse.dialects.tg_canonicalize import PATTERNS as CANONICALIZATION
from gradfuse.dialects.tg_collective import *  # noqa: F403
from gradfuse.dialects.tg_compute import *  # noqa: F403
from gradfuse.dialects.tg_conv import *  # noqa: F403
from gradfuse.dialects.tg_data import *  # noqa: F403
from gradfuse.dialects.tg_elementwise import *  # noqa: F403
from gradfuse.dialects.tg_fusion import *  # noqa: F403
from gradfuse.dialects.tg_program import *  # noqa: F403
from gradfuse.dialects.tg_sparse import *  # noqa: F403

FAMILIES = (
    tg_elementwise, tg_compute, tg_data, tg_conv, tg_sparse, tg_program, tg_collective, tg_fusion,
)  # fmt: skip


def ops_of(module: ModuleType) -> list[type[IRDLOperation]]:
    """The tg ops a family module defines, in definition order."""
    return [
        v
        for v in vars(module).values()
        if isinstance(v, type)
        and issubclass(v, IRDLOperation)
        and v.__module__ == module.__name__
        and str(getattr(v, "name", "")).startswith("tg.")
    ]


TG = Dialect("tg", [op for family in FAMILIES for op in ops_of(family)], [])

COMPOSITES = (
    SigmoidOp, TanhOp, ReluOp, SoftmaxOp, ReduceMeanOp, StopGradientOp, Conv2dOp,  # noqa: F405
    ConvTranspose2dOp, WindowsOp,  # noqa: F405
)  # fmt: skip
"""Ops that `tg-decompose` expands into primitives."""

TgCanonicalize.patterns = CANONICALIZATION  # what `canonicalize` does to tg ops
