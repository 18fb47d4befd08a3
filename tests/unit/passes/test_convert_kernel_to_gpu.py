"""convert-kernel-to-gpu: the shape of the lowered IR, launches, symbols, provenance, stats."""

from __future__ import annotations

import pytest
from kernel_programs import F3, ID1, PROGRAMS, kernel, load, lower, main, parse, store
from xdsl.dialects import arith, func, gpu, memref, scf
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Operation

from gradfuse.diagnostics import GradfuseError
from gradfuse.passes.gpu.convert_kernel_to_gpu import launch_shape
from gradfuse.provenance import Provenance
from gradfuse.stats import kernel_stats


def ops(module: ModuleOp, kind: type[Operation]) -> list:
    return [op for op in module.walk() if isinstance(op, kind)]


def gpu_funcs(module: ModuleOp) -> list[gpu.FuncOp]:
    return ops(module, gpu.FuncOp)


def constant(value: object) -> int:
    owner = getattr(value, "owner", None)
    assert isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr)
    return owner.value.value.data


@pytest.mark.parametrize(
    "threads, shape",
    [(1, (1, 32)), (8, (1, 32)), (100, (1, 128)), (256, (1, 256)), (1000, (4, 256))],
)
def test_launch_shape(threads: int, shape: tuple[int, int]) -> None:
    assert launch_shape(threads) == shape


def test_only_upstream_dialects_remain() -> None:
    for prog in PROGRAMS.values():
        module = lower(prog.module())
        names = {op.dialect_name() for op in module.walk()}
        assert names <= {"builtin", "func", "gpu", "scf", "memref", "arith", "math"}, names


def test_contraction_becomes_a_kernel_with_a_reduction_loop() -> None:
    module = lower(PROGRAMS["contraction"].module())
    (fn,) = gpu_funcs(module)
    assert fn.sym_name.data == "mm" and fn.kernel == UnitAttr()
    assert "gpu.kernel" in fn.attributes and fn.attributes["gradfuse.threads"] == IntegerAttr(8, 64)
    assert [len(ops(fn, k)) for k in (scf.ForOp, scf.IfOp, memref.LoadOp, memref.StoreOp)] == [
        1,
        1,
        3,
        1,
    ]
    (loop,) = ops(fn, scf.ForOp)
    assert constant(loop.ub) == 3 and len(loop.iter_args) == 1
    (launch,) = ops(module, gpu.LaunchFuncOp)
    assert launch.kernel.string_value() == "gradfuse_kernels.mm"
    assert [constant(v) for v in (launch.gridSizeX, launch.blockSizeX)] == [1, 32]
    assert len(launch.kernelOperands) == 4


def test_two_reductions_share_one_loop() -> None:
    (fn,) = gpu_funcs(lower(PROGRAMS["reduce"].module()))
    (loop,) = ops(fn, scf.ForOp)
    assert len(loop.results) == 2
    assert len(ops(fn, arith.MaximumfOp)) == 1 and len(ops(fn, arith.AddfOp)) >= 1


def test_group_is_one_kernel_over_both_id_ranges() -> None:
    module = lower(PROGRAMS["group"].module())
    (fn,) = gpu_funcs(module)
    assert fn.sym_name.data == "both" and fn.attributes["gradfuse.kind"] == StringAttr("group")
    assert fn.attributes["gradfuse.threads"] == IntegerAttr(6 + 4, 64)
    ifs = ops(fn, scf.IfOp)
    assert len(ifs) == 2  # id < 6 { inc } else { id < 10 { rowmax } }
    assert len(ops(module, gpu.LaunchFuncOp)) == 1


def test_loops_params_constants_and_callbacks() -> None:
    module = lower(PROGRAMS["sgd_loop"].module())
    (loop,) = [op for op in ops(module, scf.ForOp) if not isinstance(op.parent_op(), scf.IfOp)]
    assert [constant(v) for v in (loop.lb, loop.ub, loop.step)] == [0, 3, 1]
    assert len(ops(loop, gpu.LaunchFuncOp)) == 1
    (glob,) = ops(module, memref.GlobalOp)
    assert glob.attributes["gradfuse.key"] == StringAttr("w")
    assert isinstance(glob.initial_value, DenseIntOrFPElementsAttr)
    assert glob.initial_value.get_values() == (1.0, 1.0, 1.0)
    decls = {op.sym_name.data: op for op in ops(module, func.FuncOp) if not op.body.blocks}
    assert set(decls) == {"gradfuse_feed_0", "gradfuse_receive_0"}
    assert decls["gradfuse_feed_0"].attributes["gradfuse.key"] == StringAttr("g")
    calls = ops(module, func.CallOp)
    assert [c.attributes["gradfuse.key"].data for c in calls] == ["g", "t"]

    mask = lower(PROGRAMS["mask"].module())
    (const,) = ops(mask, memref.GlobalOp)
    assert const.constant == UnitAttr() and "gradfuse.key" not in const.attributes


def test_temporaries_are_views_of_one_arena() -> None:
    module = lower(PROGRAMS["chain"].module())
    (arena,) = ops(module, memref.AllocOp)
    views = ops(module, memref.ViewOp)
    assert len(views) == 4 and all(v.source == arena.memref for v in views)
    assert sorted(constant(v.byte_shift) for v in views) == [0, 0, 64, 64]
    assert module.attributes["gradfuse.peak_bytes"] == IntegerAttr(76, 64)
    assert arena.memref.type.get_shape() == (128,)


def test_locations_survive() -> None:
    module = lower(PROGRAMS["contraction"].module())
    (fn,) = gpu_funcs(module)
    assert fn.location == Provenance("model.py", 7, 3).to_location()
    (mul,) = ops(fn, arith.MulfOp)
    assert mul.location == Provenance("model.py", 3, 5).to_location()
    (launch,) = ops(module, gpu.LaunchFuncOp)
    assert launch.location == fn.location


def test_epilogue_may_not_use_a_reduction_index() -> None:
    text = main(
        f"  %x = kernel.alloc : memref<3x4xf32>\n  %y = kernel.alloc : {F3}\n"
        + kernel(
            "bad", "reduction", [3, 4], 1, [("%x", "memref<3x4xf32>"), ("%y", F3)],
            load("%a", "%b0", "affine_map<(d0, d1) -> (d0, d1)>", "memref<3x4xf32>")
            + '  %s = kernel.reduce "add" %a : f32\n'
            + "  %j = arith.index_cast %i1 : index to i64\n"
            + store("%s", "%b1", ID1, F3),
        )
        + "  func.return"
    )  # fmt: skip
    with pytest.raises(GradfuseError, match="not defined where it runs"):
        lower(parse(text))


def test_kernel_stats_before_and_after_lowering() -> None:
    for name, kernels, per_iteration, launches in [
        ("sgd_loop", 1, 1, 3),
        ("group", 1, 1, 1),
        ("chain", 3, 3, 6),
        ("views", 3, 3, 3),
    ]:
        before = kernel_stats(PROGRAMS[name].module())
        after = kernel_stats(lower(PROGRAMS[name].module()))
        assert before == after
        assert (before.kernels, before.kernels_per_iteration, before.launches) == (
            kernels,
            per_iteration,
            launches,
        )
    assert kernel_stats(PROGRAMS["chain"].module()).peak_bytes == 76
    assert kernel_stats(PROGRAMS["sgd_loop"].module()).per_loop == (1,)
    assert kernel_stats(PROGRAMS["views"].module()).per_loop == ()


def test_temporaries_need_their_offsets_from_kernel_plan_buffers() -> None:
    """convert-kernel-to-gpu lays the arena out; kernel-plan-buffers plans it, first."""
    from gradfuse.frontend.parser import parse_tg
    from gradfuse.passes import run_pipeline

    src = """func @main(%x: tensor<4xf32>) -> (tensor<f32>) {
  %e = tg.exp2 %x : tensor<4xf32>
  %s = tg.reduce_sum %e dims=[0] : tensor<f32>
  return %s
}
"""
    module = parse_tg(src, "t.tg")
    with pytest.raises(GradfuseError, match="no arena offset: run kernel-plan-buffers first"):
        run_pipeline(module, "kernels,convert-kernel-to-gpu")
    module = parse_tg(src, "t.tg")
    run_pipeline(module, "kernels,kernel-plan-buffers,convert-kernel-to-gpu")
    assert module.attributes["gradfuse.peak_bytes"].value.data > 0  # type: ignore[attr-defined]
