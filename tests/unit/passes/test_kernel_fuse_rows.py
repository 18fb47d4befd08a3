"""kernel-fuse-rows: which runs of launches become one `kernel.rows`, and that those it
refuses would compute something else row by row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from compiled import agree
from kernel_programs import kernel, load, main, parse, store

from gradfuse.backend import compile_module
from gradfuse.dialects import kernel as K
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import expand, run_pipeline
from gradfuse.passes.kernel.fuse_rows import fuse_rows

W4, Y44 = "memref<4xf32>", "memref<4x4xf32>"
ROW = "affine_map<(d0) -> (d0)>"
ID2 = "affine_map<(d0, d1) -> (d0, d1)>"


def in_place(col_read: bool) -> str:
    """y[i, j] = w[j] (or w[i]), then w[i] = 2 w[i] in place: two launches over rows [4]."""
    read = "affine_map<(d0, d1) -> (d1)>" if col_read else "affine_map<(d0, d1) -> (d0)>"
    return main(
        f'  %w = kernel.param "w" : {W4}\n  %y = kernel.alloc : {Y44}\n'
        + kernel("k0", "elementwise", [4, 4], 2, [("%w", W4), ("%y", Y44)],
                 load("%a", "%b0", read, W4) + store("%a", "%b1", ID2, Y44))
        + kernel("k1", "elementwise", [4], 1, [("%w", W4)],
                 load("%a", "%b0", ROW, W4) + "  %t = arith.addf %a, %a : f32\n"
                 + store("%t", "%b0", ROW, W4))
        + f'  kernel.receive "y", %y : {Y44}\n  func.return'
    )  # fmt: skip


def rows_ops(module) -> list[K.RowsOp]:
    return [op for op in module.walk() if isinstance(op, K.RowsOp)]


def test_a_write_after_a_read_of_other_rows_keeps_the_launches_apart():
    """Row 0 would double w[0] before row 1 has read it."""
    module = parse(in_place(col_read=True))
    assert fuse_rows(next(iter(module.ops)).body.block) == 0
    assert not rows_ops(module)


_CPU = expand("cpu").split(",")
AFTER_ROWS = {  # each backend's passes after kernel-fuse-rows
    "numpy": "",
    "c": ",".join(_CPU[_CPU.index("kernel-fuse-rows") + 1 :]),
    "lowered": "kernel-plan-buffers,convert-kernel-to-gpu",
}


def test_a_write_after_a_read_of_the_same_row_is_one_launch_and_exact():
    module = parse(in_place(col_read=False))
    assert fuse_rows(next(iter(module.ops)).body.block) == 1
    module.verify()
    w = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    for backend in ("numpy", "c", "lowered"):
        fused = parse(in_place(col_read=False))
        run_pipeline(fused, "kernel-fuse-rows")
        assert len(rows_ops(fused)) == 1
        got = compile_module(fused, backend, pipeline=AFTER_ROWS[backend]).run(params={"w": w})
        np.testing.assert_array_equal(got.received["y"][0][0], np.repeat(w[:, None], 4, 1))
        np.testing.assert_array_equal(got.params["w"], 2 * w)


def test_a_transformer_layer_step_is_at_most_a_quarter_of_pytorchs_kernels():
    """TransformerEncoderLayer(64, 4, 128) on (2, 16, 64), sum loss, SGD: PyTorch eager
    runs 56 kernel-running ATen ops per step (benchmarks/transformer.py counts them)."""
    import gradfuse
    from gradfuse import Feeder, ir_for
    from gradfuse.nn import SGD, TransformerEncoderLayer

    gradfuse.reset()
    gradfuse.manual_seed(0)
    layer = TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    opt = SGD(layer.parameters())
    x = np.zeros((2, 16, 64), np.float32)

    def step() -> None:
        opt.zero_grad()
        layer(Feeder(lambda: x, shape=[2, 16, 64], name="x")).sum().backward()
        opt.step()

    ir_for(range(2), step)
    module = gradfuse.compile("numpy").source.clone()
    run_pipeline(module, "kernels")
    from gradfuse.stats import kernel_stats

    assert kernel_stats(module).kernels_per_iteration <= 56 // 4
    # the attention softmax (row max, sum of exponentials, normalise) shares one launch
    softmax = [r for r in rows_ops(module) if r.row_sizes == (2, 4, 16)]
    assert softmax and len(list(softmax[0].body.block.ops)) >= 3


def test_an_inner_loops_step_over_flat_rows_is_one_launch_and_computes_the_same():
    """kernel-fuse-rows.tg's `inner_rows` (4 time steps in two nested loops, each one
    launch over rows [2], its contraction split from [6] into [2, 3]) on numpy, c and
    the lowered interpreter against the reference, to `agree`'s 1e-5 (+1e-6). With
    x ~ U(0, 1) and w ~ U(-0.5, 0.5) the values stay in [0.01, 0.99], and float32 is
    within 3.8e-7 (4.1e-6 relative) of float64 there: two float32 orders of summation
    differ by at most twice that."""
    golden = Path(__file__).parents[2] / "filecheck/passes/kernel-fuse-rows.tg"
    src = next(c for c in golden.read_text().split("// -----") if "func @inner_rows" in c)
    module = parse_tg(src)
    run_pipeline(module, "kernels")
    assert len(rows_ops(module)) == 1
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (2, 3, 4)).astype(np.float32)
    w = rng.uniform(-0.5, 0.5, (4, 4)).astype(np.float32)
    for backend in ("numpy", "c", "lowered"):
        agree(src, backend, args=(x, w))
