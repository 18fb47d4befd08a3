"""The `tg` ("tensor graph") dialect: value-semantic tensors, loops and state.

Ops live in files by family: `tg_compute` (elementwise, dot, reductions,
composites), `tg_data` (constants and movement), `tg_program` (params,
feeders, receivers, loops, grad), `tg_sparse`, `tg_conv`, and `tg_fusion`
(`tg-fuse`'s decisions: one region per future kernel). This module gathers them
into `TG`.

    %w = tg.param "fc.weight" : tensor<4x4xf32>
    %y = tg.dot %x, %w : tensor<2x4xf32>
"""

from xdsl.ir import Dialect

from gradfuse.dialects.tg_base import (
    FLOAT_TYPES,
    TgCanonicalize,
    fmt_shape,
    parse_type,
    shape_of,
    tensor,
)
from gradfuse.dialects.tg_canonicalize import PATTERNS as CANONICALIZATION
from gradfuse.dialects.tg_compute import (
    AddOp,
    BinaryOp,
    CastOp,
    CmpLtOp,
    DivOp,
    DotOp,
    ErfOp,
    Exp2Op,
    Log2Op,
    MaxOp,
    MulOp,
    NegOp,
    RecipOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceOp,
    ReduceSumOp,
    ReluOp,
    SigmoidOp,
    SinOp,
    SoftmaxOp,
    SqrtOp,
    StopGradientOp,
    SubOp,
    TanhOp,
    UnaryOp,
    WhereOp,
)
from gradfuse.dialects.tg_conv import Conv2dOp, ConvGeometry, ConvTranspose2dOp, WindowsOp
from gradfuse.dialects.tg_data import (
    BroadcastOp,
    ConcatOp,
    ConstantOp,
    PadOp,
    PermuteOp,
    ReshapeOp,
    SliceOp,
    ViewAccessOp,
)
from gradfuse.dialects.tg_fusion import FusionOp, FusionYieldOp
from gradfuse.dialects.tg_program import (
    AssignOp,
    FeederOp,
    ForOp,
    GradOp,
    ParamOp,
    ReceiverOp,
    YieldOp,
)
from gradfuse.dialects.tg_sparse import GatherOp, RandomOp, ScatterAddOp

COMPOSITES = (
    SigmoidOp, TanhOp, ReluOp, SoftmaxOp, ReduceMeanOp, StopGradientOp, Conv2dOp,
    ConvTranspose2dOp, WindowsOp,
)  # fmt: skip
"""Ops that `tg-decompose` expands into primitives."""

TG = Dialect(
    "tg",
    [
        AddOp, SubOp, MulOp, DivOp, MaxOp, CmpLtOp,
        NegOp, Exp2Op, Log2Op, SqrtOp, RecipOp, SinOp, ErfOp,
        WhereOp, CastOp, DotOp, ReduceSumOp, ReduceMaxOp,
        SigmoidOp, TanhOp, ReluOp, SoftmaxOp, ReduceMeanOp, StopGradientOp,
        ConstantOp, ReshapeOp, PermuteOp, BroadcastOp, SliceOp, PadOp, ConcatOp, ViewAccessOp,
        ParamOp, AssignOp, FeederOp, ReceiverOp, ForOp, YieldOp, GradOp,
        GatherOp, ScatterAddOp, RandomOp, Conv2dOp, ConvTranspose2dOp, WindowsOp,
        FusionOp, FusionYieldOp,
    ],
    [],
)  # fmt: skip

TgCanonicalize.patterns = CANONICALIZATION  # what `canonicalize` does to tg ops

__all__ = [
    "TG", "COMPOSITES", "FLOAT_TYPES", "parse_type", "BinaryOp", "UnaryOp", "ReduceOp", "fmt_shape", "shape_of", "tensor",
    "AddOp", "SubOp", "MulOp", "DivOp", "MaxOp", "CmpLtOp",
    "NegOp", "Exp2Op", "Log2Op", "SqrtOp", "RecipOp", "SinOp", "ErfOp",
    "WhereOp", "CastOp", "DotOp", "ReduceSumOp", "ReduceMaxOp",
    "SigmoidOp", "TanhOp", "ReluOp", "SoftmaxOp", "ReduceMeanOp", "StopGradientOp",
    "ConstantOp", "ReshapeOp", "PermuteOp", "BroadcastOp", "SliceOp", "PadOp", "ConcatOp",
    "ViewAccessOp", "ParamOp", "AssignOp", "FeederOp", "ReceiverOp", "ForOp", "YieldOp", "GradOp",
    "ErfOp", "GatherOp", "ScatterAddOp", "RandomOp", "Conv2dOp", "ConvTranspose2dOp",
    "ConvGeometry", "WindowsOp", "FLOAT_TYPES", "parse_type", "FusionOp", "FusionYieldOp",
]  # fmt: skip
