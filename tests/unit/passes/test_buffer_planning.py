"""Buffer planning: live ranges over program order and loops, reuse, alignment, peak bytes."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_programs import (
    PROGRAMS,
    kernel,
    load,
    loop,
    lower,
    main,
    parse,
    store,
    unary,
)
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, f16, f32, i1
from xdsl.ir import SSAValue

from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.dialects import kernel as kd
from gradfuse.passes import make_context
from gradfuse.passes.kernel.plan_buffers import (
    ALIGNMENT,
    BufferPlan,
    KernelPlanBuffersPass,
    nbytes,
    plan_buffers,
)


def allocs(text: str) -> tuple[ModuleOp, func.FuncOp, dict[str, SSAValue]]:
    """The parsed module, its function and its allocs by SSA name (`%t0` -> value)."""
    module = parse(text)
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    names = {}
    for n, op in enumerate(op for op in fn.walk() if isinstance(op, kd.AllocOp)):
        names[f"t{n}"] = op.result
    return module, fn, names


def temps(n: int, size: int = 3) -> str:
    return "".join(f"  %t{k} = kernel.alloc : memref<{size}xf32>\n" for k in range(n))


def check_no_conflicts(plan: BufferPlan) -> None:
    """Buffers live at the same time never share a byte; every offset is aligned."""
    for v in plan.offsets:
        assert plan.offsets[v] % ALIGNMENT == 0
        assert plan.offsets[v] + plan.sizes[v] <= plan.peak_bytes
    for a, b in combinations(plan.offsets, 2):
        (s1, e1), (s2, e2) = plan.ranges[a], plan.ranges[b]
        if s1 <= e2 and s2 <= e1:
            o1, o2 = plan.offsets[a], plan.offsets[b]
            assert o1 + plan.sizes[a] <= o2 or o2 + plan.sizes[b] <= o1, (a, b)


def test_nbytes() -> None:
    assert nbytes(MemRefType(f32, [2, 4])) == 32
    assert nbytes(MemRefType(f16, [3])) == 6
    assert nbytes(MemRefType(i1, [5])) == 5
    assert nbytes(MemRefType(f32, [])) == 4


def test_a_chain_reuses_memory_of_dead_buffers() -> None:
    body = (
        temps(4)
        + '  kernel.feed "x", %t0 : memref<3xf32>\n'
        + unary("a", "%t0", "%t1", "arith.addf %a, %a")
        + unary("b", "%t1", "%t2", "arith.mulf %a, %a")
        + unary("c", "%t2", "%t3", "arith.negf %a")
        + '  kernel.receive "y", %t3 : memref<3xf32>\n  func.return'
    )
    _, fn, t = allocs(main(body))
    plan = plan_buffers(fn)
    assert [plan.ranges[t[f"t{k}"]] for k in range(4)] == [(4, 5), (5, 6), (6, 7), (7, 8)]
    assert [plan.offsets[t[f"t{k}"]] for k in range(4)] == [0, 64, 0, 64]
    assert plan.peak_bytes == 64 + 12
    check_no_conflicts(plan)


def test_buffers_live_together_never_overlap() -> None:
    # every buffer is fed first and all are read by the last receive: all live at once
    feeds = "".join(f'  kernel.feed "x{k}", %t{k} : memref<3xf32>\n' for k in range(3))
    names = ", ".join(f"%t{k}" for k in range(3))
    body = (
        temps(3) + feeds + f'  kernel.receive "all", {names} : '
        + ", ".join(["memref<3xf32>"] * 3) + "\n  func.return"
    )  # fmt: skip
    _, fn, t = allocs(main(body))
    plan = plan_buffers(fn)
    assert sorted(plan.offsets.values()) == [0, 64, 128]
    assert plan.peak_bytes == 128 + 12
    check_no_conflicts(plan)


def test_largest_first_then_first_fit() -> None:
    # t0 (400 B) and t1 (40 B) live together; t2 (40 B) only after t1 died
    body = (
        "  %t0 = kernel.alloc : memref<100xf32>\n  %t1 = kernel.alloc : memref<10xf32>\n"
        "  %t2 = kernel.alloc : memref<10xf32>\n"
        '  kernel.feed "a", %t0 : memref<100xf32>\n  kernel.feed "b", %t1 : memref<10xf32>\n'
        '  kernel.receive "b", %t1 : memref<10xf32>\n  kernel.feed "c", %t2 : memref<10xf32>\n'
        '  kernel.receive "ac", %t0, %t2 : memref<100xf32>, memref<10xf32>\n  func.return'
    )
    _, fn, t = allocs(main(body))
    plan = plan_buffers(fn)
    assert [plan.offsets[t[k]] for k in ("t0", "t1", "t2")] == [0, 448, 448]
    assert plan.peak_bytes == 448 + 40


def test_value_read_across_iterations_lives_over_the_whole_loop() -> None:
    # %t0 is accumulated in place in the loop (read before written): live over the loop
    body = (
        temps(3)
        + '  kernel.feed "x", %t0 : memref<3xf32>\n'
        + loop(
            2,
            unary("inc", "%t0", "%t0", "arith.addf %a, %a")
            + '  kernel.feed "y", %t1 : memref<3xf32>\n'
            + '  kernel.receive "y", %t1 : memref<3xf32>',
        )
        + '  kernel.receive "x", %t0 : memref<3xf32>\n  func.return'
    )
    _, fn, t = allocs(main(body))
    plan = plan_buffers(fn)
    for_start, for_end = 4, 8  # kernel.for, kernel, feed, receive, kernel.yield
    lo, hi = plan.ranges[t["t0"]]
    assert lo <= for_start and hi >= for_end
    assert plan.ranges[t["t1"]] == (6, 7)  # fed each iteration: not carried
    assert plan.offsets[t["t0"]] != plan.offsets[t["t1"]]
    check_no_conflicts(plan)


def test_value_written_in_loop_and_read_after_it() -> None:
    body = (
        temps(2)
        + loop(
            3,
            '  kernel.feed "x", %t1 : memref<3xf32>\n'
            + unary("last", "%t1", "%t0", "arith.negf %a"),
        )
        + '  kernel.receive "t", %t0 : memref<3xf32>\n  func.return'
    )
    _, fn, t = allocs(main(body))
    plan = plan_buffers(fn)
    assert plan.ranges[t["t0"]] == (4, 6)  # from its write in the loop to the receive
    assert plan.ranges[t["t1"]] == (3, 4)


def test_read_first_in_a_nested_loop_is_carried_by_both_loops() -> None:
    body = (
        temps(1)
        + '  kernel.feed "x", %t0 : memref<3xf32>\n'
        + loop(2, loop(2, unary("acc", "%t0", "%t0", "arith.addf %a, %a"), "%j"))
        + "  func.return"
    )
    _, fn, t = allocs(main(body))
    # alloc 0, feed 1, outer for 2, inner for 3, kernel 4, yields 5 and 6, return 7
    assert plan_buffers(fn).ranges[t["t0"]] == (1, 6)


def test_plan_pass_annotates_allocs_and_module() -> None:
    module = PROGRAMS["chain"].module()
    KernelPlanBuffersPass().apply(make_context(), module)
    assert module.attributes["gradfuse.peak_bytes"] == IntegerAttr(76, 64)
    offsets = [op.offset.value.data for op in module.walk() if isinstance(op, kd.AllocOp)]
    assert offsets == [0, 64, 0, 64]


def test_every_sample_program_plans_without_conflicts() -> None:
    for prog in PROGRAMS.values():
        fn = next(op for op in prog.module().walk() if isinstance(op, func.FuncOp))
        check_no_conflicts(plan_buffers(fn))


def _rows_kernel(name: str, src: str, dst: str, expr: str, rows: int) -> str:
    ty, idx = f"memref<{rows}x4xf32>", "affine_map<(d0, d1) -> (d0, d1)>"
    return kernel(
        name, "elementwise", [rows, 4], 2, [(src, ty), (dst, ty)],
        load("%a", "%b0", idx, ty) + f"  %r = {expr} : f32\n" + store("%r", "%b1", idx, ty),
    )  # fmt: skip


_OPS = {"+": "arith.addf %a, %a", "*": "arith.mulf %a, %a", "-": "arith.negf %a"}


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from(sorted(_OPS))),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(1, 20), min_size=6, max_size=6),
)
def test_random_straight_line_programs_plan_and_run(
    steps: list[tuple[int, int, str]], rows: list[int]
) -> None:
    """Random chains of kernels over 6 temporaries of random sizes: no live buffers share
    memory, and the lowered program computes what NumPy does (the arena starts as NaN)."""
    body = "".join(f"  %t{k} = kernel.alloc : memref<{n}x4xf32>\n" for k, n in enumerate(rows))
    body += "".join(
        f'  kernel.feed "x{k}", %t{k} : memref<{n}x4xf32>\n' for k, n in enumerate(rows)
    )
    values = [np.full((n, 4), k + 1.0, np.float32) for k, n in enumerate(rows)]
    expected = [v.copy() for v in values]
    last = 0
    for n, (src, dst, op) in enumerate(steps):
        last = dst if rows[src] == rows[dst] else src  # in place when the shapes differ
        body += _rows_kernel(f"k{n}", f"%t{src}", f"%t{last}", _OPS[op], rows[src])
        a = expected[src]
        expected[last] = {"+": a + a, "*": a * a, "-": -a}[op]
    body += f'  kernel.receive "last", %t{last} : memref<{rows[last]}x4xf32>\n  func.return'
    _, fn, _ = allocs(main(body))
    check_no_conflicts(plan_buffers(fn))
    feeders = {f"x{k}": v for k, v in enumerate(values)}
    result = run_lowered(lower(parse(main(body))), feeders=feeders)
    np.testing.assert_allclose(result.received["last"][0][0], expected[last], rtol=1e-6)


def _copy(name: str, src: str, dst: str, dst_cols: int, shift: int) -> str:
    """An elementwise kernel over [2, 4] reading `src` (2 x 4) at (d0, d1) and writing
    `dst` (2 x dst_cols) at (d0, d1 + shift)."""
    a, b = "memref<2x4xf32>", f"memref<2x{dst_cols}xf32>"
    at = f"affine_map<(d0, d1) -> (d0, d1 + {shift})>"
    return kernel(
        name, "elementwise", [2, 4], 2, [(src, a), (dst, b)],
        load("%a", "%b0", "affine_map<(d0, d1) -> (d0, d1)>", a)
        + "  %r = arith.negf %a : f32\n" + store("%r", "%b1", at, b),
    )  # fmt: skip


def _read(name: str, src: str, dst: str, shift: int) -> str:
    """An elementwise kernel over [2, 4] reading `src` (2 x 5) at (d0, d1 + shift)."""
    a, b = "memref<2x5xf32>", "memref<2x4xf32>"
    return kernel(
        name, "elementwise", [2, 4], 2, [(src, a), (dst, b)],
        load("%a", "%b0", f"affine_map<(d0, d1) -> (d0, d1 + {shift})>", a)
        + "  %r = arith.negf %a : f32\n"
        + store("%r", "%b1", "affine_map<(d0, d1) -> (d0, d1)>", b),
    )  # fmt: skip


def test_a_padded_row_written_whole_is_not_carried() -> None:
    """A buffer whose last column no kernel touches (a row `kernel-pad-rows` padded):
    a kernel writing the other columns writes all of its value, so in a loop it is not
    carried (`used_extent`); read at the last column too, it is."""
    for shift, carried in ((0, False), (1, True)):
        body = (
            "  %t0 = kernel.alloc : memref<2x4xf32>\n"
            "  %t1 = kernel.alloc : memref<2x5xf32>\n"
            "  %t2 = kernel.alloc : memref<2x4xf32>\n"
            + loop(
                2,
                '  kernel.feed "x", %t0 : memref<2x4xf32>\n'
                + _copy("write", "%t0", "%t1", 5, 0)
                + _read("read", "%t1", "%t2", shift)
                + '  kernel.receive "y", %t2 : memref<2x4xf32>',
            )
            + "  func.return"
        )
        _, fn, t = allocs(main(body))
        plan = plan_buffers(fn)
        # allocs 0-2, kernel.for 3, feed 4, kernels 5 and 6, receive 7, kernel.yield 8
        assert (plan.ranges[t["t1"]] != (5, 6)) == carried
        lo, hi = plan.ranges[t["t1"]]
        assert (lo <= 3 and hi >= 8) == carried
        check_no_conflicts(plan)
