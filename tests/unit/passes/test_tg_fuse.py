"""tg-fuse: kernel counts, fusion decisions and numbers equal to the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from compiled import needs_mpicc  # tests/unit
from fusion_programs import programs
from hypothesis import given, settings

from gradfuse.backend.interpreters.kernel import run_kernels
from gradfuse.backend.interpreters.tg import run
from gradfuse.dialects import kernel as K
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

FUSE = "kernels"
ROOT = Path(__file__).resolve().parents[3]

MLP = """
func @main() {
  tg.for %i = 0 to 3 step 1 {
    %x = tg.feeder "x" : tensor<2x8xf32>
    %w1 = tg.param "0.weight" init=0.1 : tensor<8x8xf32>
    %b1 = tg.param "0.bias" init=0.2 : tensor<8xf32>
    %w2 = tg.param "2.weight" init=-0.3 : tensor<8x8xf32>
    %b2 = tg.param "2.bias" init=0.05 : tensor<8xf32>
    %w1t = tg.permute %w1 perm=[1, 0] : tensor<8x8xf32>
    %z1 = tg.dot %x, %w1t : tensor<2x8xf32>
    %b1r = tg.reshape %b1 : tensor<1x8xf32>
    %b1b = tg.broadcast %b1r : tensor<2x8xf32>
    %a1 = tg.add %z1, %b1b : tensor<2x8xf32>
    %h = tg.sigmoid %a1 : tensor<2x8xf32>
    %w2t = tg.permute %w2 perm=[1, 0] : tensor<8x8xf32>
    %z2 = tg.dot %h, %w2t : tensor<2x8xf32>
    %b2r = tg.reshape %b2 : tensor<1x8xf32>
    %b2b = tg.broadcast %b2r : tensor<2x8xf32>
    %y = tg.add %z2, %b2b : tensor<2x8xf32>
    %g1, %g2, %g3, %g4 = tg.grad %y wrt %w1, %b1, %w2, %b2 : tensor<8x8xf32>, tensor<8xf32>, tensor<8x8xf32>, tensor<8xf32>
    %lr = tg.constant -0.01 : tensor<8x8xf32>
    %lrb = tg.constant -0.01 : tensor<8xf32>
    %d1 = tg.mul %g1, %lr : tensor<8x8xf32>
    %n1 = tg.add %w1, %d1 : tensor<8x8xf32>
    tg.assign "0.weight", %n1
    %d2 = tg.mul %g2, %lrb : tensor<8xf32>
    %n2 = tg.add %b1, %d2 : tensor<8xf32>
    tg.assign "0.bias", %n2
    %d3 = tg.mul %g3, %lr : tensor<8x8xf32>
    %n3 = tg.add %w2, %d3 : tensor<8x8xf32>
    tg.assign "2.weight", %n3
    %d4 = tg.mul %g4, %lrb : tensor<8xf32>
    %n4 = tg.add %b2, %d4 : tensor<8xf32>
    tg.assign "2.bias", %n4
    tg.yield
  }
  %fw = tg.param "0.weight" : tensor<8x8xf32>
  tg.receiver "params", %fw
  return
}
"""


def both(src: str, feeders: dict) -> tuple:
    ref = parse_tg(src)
    run_pipeline(ref, "tg")
    fused = parse_tg(src)
    run_pipeline(fused, FUSE)
    return run(ref, feeders=feeders), run_kernels(fused, feeders=feeders), fused


def launches_in_loop(module) -> int:
    loop = next(op for op in module.walk() if op.name == "kernel.for")
    return sum(isinstance(op, K.KernelOp | K.GroupOp | K.RowsOp) for op in loop.body.block.ops)


def test_mlp_step_is_two_launches_and_exact():
    # forward and backward of the hidden layer row by row (kernel-fuse-rows), then the
    # four updates as one launch
    xs = np.random.default_rng(0).standard_normal((3, 2, 8)).astype(np.float32)
    ref, fused, module = both(MLP, {"x": xs})
    assert launches_in_loop(module) == 2
    for key in ref.params:
        np.testing.assert_allclose(fused.params[key], ref.params[key], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fused.received["params"][0][0], ref.received["params"][0][0])


def test_parameter_updates_are_in_place_and_horizontal():
    _, _, module = both(MLP, {"x": np.zeros((2, 8), np.float32)})
    group = next(op for op in module.walk() if isinstance(op, K.GroupOp))
    kernels = list(group.body.block.ops)
    assert len(kernels) == 4
    params = {op.result: op.key.data for op in module.walk() if isinstance(op, K.ParamOp)}
    written = set()
    for k in kernels:
        for store in k.body.block.ops:
            if isinstance(store, K.StoreOp):
                buffer = k.buffers[k.buffer_args.index(store.buffer)]
                written.add(params.get(buffer))
    assert written == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_views_cost_no_kernel():
    src = """
func @main(%b: tensor<4xf32>, %x: tensor<3x4xf32>) -> (tensor<4x3xf32>) {
  %r = tg.reshape %b : tensor<1x4xf32>
  %y = tg.broadcast %r : tensor<3x4xf32>
  %s = tg.add %y, %x : tensor<3x4xf32>
  %t = tg.permute %s perm=[1, 0] : tensor<4x3xf32>
  %e = tg.exp2 %t : tensor<4x3xf32>
  return %e
}
"""
    module = parse_tg(src)
    run_pipeline(module, FUSE)
    kernels = [op for op in module.walk() if isinstance(op, K.KernelOp)]
    assert len(kernels) == 1
    b = np.arange(4, dtype=np.float32)
    x = np.ones((3, 4), np.float32)
    out = run_kernels(module, args=[b, x]).results[0]
    np.testing.assert_allclose(out, np.exp2((b + x).T), rtol=1e-6)


def test_reduction_with_prologue_and_epilogue_is_one_kernel():
    src = """
func @main(%x: tensor<3x4xf32>) -> (tensor<3xf32>) {
  %e = tg.exp2 %x : tensor<3x4xf32>
  %s = tg.reduce_sum %e dims=[1] : tensor<3xf32>
  %l = tg.log2 %s : tensor<3xf32>
  return %l
}
"""
    module = parse_tg(src)
    run_pipeline(module, FUSE)
    kernels = [op for op in module.walk() if isinstance(op, K.KernelOp)]
    assert len(kernels) == 1 and kernels[0].kind.data == "reduction"
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    out = run_kernels(module, args=[x]).results[0]
    np.testing.assert_allclose(out, np.log2(np.exp2(x).sum(1)), rtol=1e-5)


def test_contraction_is_never_recomputed():
    src = """
func @main(%x: tensor<3x4xf32>, %w: tensor<4x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
  %y = tg.dot %x, %w : tensor<3x4xf32>
  %a = tg.exp2 %y : tensor<3x4xf32>
  %b = tg.sin %y : tensor<3x4xf32>
  return %a, %b
}
"""
    module = parse_tg(src)
    run_pipeline(module, FUSE)
    reduces = [op for op in module.walk() if isinstance(op, K.ReduceOp)]
    assert len(reduces) == 1


@settings(max_examples=30, deadline=None)
@given(programs())
def test_random_programs_match_the_reference(src: str):
    xs = np.random.default_rng(2).standard_normal((8, *_feeder_shape(src))).astype(np.float32) * 0.5
    ref, fused, _ = both(src, {"x": xs})
    for got, want in zip(fused.received["out"], ref.received["out"]):
        np.testing.assert_allclose(got[0], want[0], rtol=2e-4, atol=1e-5)
    for key in ref.params:
        np.testing.assert_allclose(fused.params[key], ref.params[key], rtol=2e-4, atol=1e-5)


def _feeder_shape(src: str) -> tuple[int, ...]:
    line = next(ln for ln in src.splitlines() if "tg.feeder" in ln)
    dims = line.split("tensor<")[1].split("xf32")[0]
    return tuple(int(d) for d in dims.split("x"))


def test_loop_carried_values_become_state_and_match():
    src = """
func @main(%x: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>) {
  %s0 = tg.reduce_sum %x dims=[0] : tensor<4xf32>
  %r, %s = tg.for %i = 0 to 5 step 1 iter(%a = %x, %t = %s0) : tensor<3x4xf32>, tensor<4xf32> {
    %b = tg.sin %a : tensor<3x4xf32>
    %u = tg.reduce_max %b dims=[0] : tensor<4xf32>
    %v = tg.add %t, %u : tensor<4xf32>
    tg.yield %b, %v
  }
  return %r, %s
}
"""
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    ref = parse_tg(src)
    run_pipeline(ref, "tg")
    fused = parse_tg(src)
    run_pipeline(fused, FUSE)
    want, got = run(ref, args=[x]).results, run_kernels(fused, args=[x]).results
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_softmax_is_three_kernels_and_exact():
    src = """
func @main(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>) {
  %s = tg.softmax %x dim=1 : tensor<4x8xf32>
  return %s
}
"""
    module = parse_tg(src)
    run_pipeline(module, FUSE)
    assert sum(isinstance(op, K.KernelOp) for op in module.walk()) == 3
    x = np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    out = run_kernels(module, args=[x]).results[0]
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_zero_padding_is_a_guarded_load_not_a_kernel():
    src = """
func @main(%x: tensor<2x3xf32>, %w: tensor<5x2xf32>) -> (tensor<4x2xf32>) {
  %p = tg.pad %x low=[1, 1] high=[1, 1] value=0.0 : tensor<4x5xf32>
  %d = tg.dot %p, %w : tensor<4x2xf32>
  return %d
}
"""
    module = parse_tg(src)
    run_pipeline(module, FUSE)
    kernels = [op for op in module.walk() if isinstance(op, K.KernelOp)]
    assert len(kernels) == 1
    guarded = [op for op in module.walk() if isinstance(op, K.LoadOp) and op.guard is not None]
    assert len(guarded) == 1
    rng = np.random.default_rng(5)
    x, w = (
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((5, 2)).astype(np.float32),
    )
    want = np.pad(x, 1) @ w
    np.testing.assert_allclose(run_kernels(module, args=[x, w]).results[0], want, rtol=1e-5)


STACKING = """
func @main(%x: tensor<2x3xf32>, %w: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
  %r = tg.for %i = 0 to 6 step 1 iter(%h = %x) : tensor<2x3xf32> {
    %a = tg.mul %h, %w : tensor<2x3xf32>
    %s = tg.sin %a : tensor<2x3xf32>
    tg.yield %s
  }
  %g = tg.grad %r wrt %w : tensor<2x3xf32>
  return %g
}
"""


def test_a_stack_slot_is_written_in_place():
    """`stack + scatter_add(slot, v)` assigned back to the stack adds v into the stack's
    buffer: no kernel fills or adds over the whole [6, 2, 3] stack in the loop."""
    rng = np.random.default_rng(4)
    x, w = (rng.uniform(-1, 1, (2, 3)).astype(np.float32) for _ in range(2))
    ref = parse_tg(STACKING)
    run_pipeline(ref, "tg")
    fused = parse_tg(STACKING)
    run_pipeline(fused, FUSE)
    np.testing.assert_allclose(
        run_kernels(fused, args=[x, w]).results[0], run(ref, args=[x, w]).results[0], rtol=1e-6
    )
    loop = next(op for op in fused.walk() if op.name == "kernel.for")
    kernels = [op for op in loop.walk() if isinstance(op, K.KernelOp)]
    assert kernels and all(6 not in k.domain_sizes for k in kernels)
    adds = [op for k in kernels for op in k.walk() if isinstance(op, K.ScatterAddOp)]
    assert len(adds) == 2  # the two stacks (sin's input and h), one slot each
    assert all(op.one_slot for op in adds)  # distinct elements: no atomic adds
    lowered = parse_tg(STACKING)
    run_pipeline(lowered, "default")
    assert not [op for op in lowered.walk() if op.name == "memref.atomic_rmw"]


def test_twin_and_unchanged_carried_values_match_the_reference():
    """tg-loop-state keeps one of two twin carried values and none that a loop yields
    unchanged (tests/filecheck/passes/tg-loop-state.tg): the same numbers."""
    src = (ROOT / "tests/filecheck/passes/tg-loop-state.tg").read_text()
    src = src[src.index("func @twins") :]
    rng = np.random.default_rng(8)
    x, w = (rng.uniform(-1, 1, 4).astype(np.float32) for _ in range(2))
    ref = parse_tg(src)
    run_pipeline(ref, "tg")
    fused = parse_tg(src)
    run_pipeline(fused, FUSE)
    got, want = run_kernels(fused, args=[x, w]).results, run(ref, args=[x, w]).results
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(want[0], 3 * x * w, rtol=1e-6)


def test_a_one_element_value_of_rank_1_is_recomputed_where_it_is_read():
    """`x * (t / (t - 1))` with t a one-element slice [1]: the scalar's ops join x's
    kernel (one kernel) and read index 0 of their operands (tg-fuse-rules.tg has the
    golden case; they crashed the lowering with an empty map before), on every backend."""
    from gradfuse.backend import compile_module

    src = """
func @main(%s: tensor<3xf32>, %x: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
  %t = tg.view %s map=affine_map<(d0) -> (2)> : tensor<1xf32>
  %one = tg.constant 1.0 : tensor<1xf32>
  %m = tg.sub %t, %one : tensor<1xf32>
  %q = tg.div %t, %m : tensor<1xf32>
  %qb = tg.view %q map=affine_map<(d0, d1) -> (0)> : tensor<2x3xf32>
  %y = tg.mul %x, %qb : tensor<2x3xf32>
  return %y
}
"""
    module = parse_tg(src)
    run_pipeline(module, FUSE)
    assert sum(isinstance(op, K.KernelOp) for op in module.walk()) == 1
    s = np.array([0.5, 2.0, 3.0], np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = x * np.float32(1.5)  # 3 / (3 - 1), exact in float32
    for backend in ("lowered", "c"):
        got = compile_module(parse_tg(src), backend).run(args=[s, x]).results[0]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("c", marks=needs_mpicc)])
def test_a_second_write_of_a_param_lands_last(backend: str):
    """w = sum over ranks of x, then w = 0.5 * that, then w + 0.5 (tg-fuse-rules.tg has
    the golden case): the kernels give the reference's result; the first write landed
    last before, on numpy and c."""
    from gradfuse.backend import compile_module

    src = """
func @main(%x: tensor<3xf32>) -> (tensor<3xf32>) {
  %w = tg.param "w" init=0.0 : tensor<3xf32>
  %s = tg.allreduce %x reduce="sum" : tensor<3xf32>
  tg.assign "w", %s
  %c = tg.constant 0.5 : tensor<3xf32>
  %m = tg.mul %s, %c : tensor<3xf32>
  tg.assign "w", %m
  %r = tg.param "w" : tensor<3xf32>
  %o = tg.add %r, %c : tensor<3xf32>
  return %o
}
"""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    got = compile_module(parse_tg(src), backend).run(args=[x]).results[0]
    np.testing.assert_array_equal(got, 0.5 * x + 0.5)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_two_indexed_updates_of_one_tensor_fuse_without_a_cycle(backend: str):
    """`forces[0] += d; forces[1] -= d` (pytorch/examples' mass-spring system): the
    second `tg.where` reads the first one's kernel, the second scatter's kernel and a
    mask kernel of its own. Merging the first where's kernel into the mask's, which the
    where joins, would put the scatter's kernel (which reads the first where) both
    before and after it: planning then looped forever. The merge is refused; the values
    are the reference's."""
    import gradfuse

    got = {}
    for name in ("reference", backend):
        gradfuse.reset()
        p = gradfuse.Parameter(np.array([[0.0, 0.0], [1.0, 0.5]], np.float32), name="p")
        forces = gradfuse.zeros_like(p)
        d = p[1] - p[0]
        forces[0] += d * d.norm()
        forces[1] -= d
        (forces * forces).sum().backward()
        gradfuse.Receiver(lambda *v, name=name: got.setdefault(name, v), [forces, p.grad])
        gradfuse.execute(backend=name)
    for ours, want in zip(got[backend], got["reference"], strict=True):
        np.testing.assert_allclose(ours, want, rtol=1e-6)


def test_a_dependency_cycle_is_an_internal_error_not_a_hang():
    """`Planner.link` that would make two kernels wait for each other raises."""
    from gradfuse.diagnostics import GradfuseError
    from gradfuse.passes.lib.fusion import Planner

    module = parse_tg("func @main(%x: tensor<2xf32>) -> (tensor<2xf32>) {\n  %y = tg.neg %x : tensor<2xf32>\n  %z = tg.exp2 %y : tensor<2xf32>\n  return %z\n}")  # fmt: skip
    planner = Planner(module.body.block.first_op.body.block)
    a = planner.new_group("elementwise", (2,), 1)
    b = planner.new_group("elementwise", (2,), 1)
    for g, op in zip((a, b), list(planner.block.ops)[:2], strict=True):
        planner.add(g, _member(op))
    planner.link(b, a)
    with pytest.raises(GradfuseError, match="two kernels wait for each other"):
        planner.link(a, b)


def _member(op):  # noqa: ANN001, ANN202
    from gradfuse import affine
    from gradfuse.passes.lib.fusion_graph import Member

    return Member(op, affine.identity_map(1))
