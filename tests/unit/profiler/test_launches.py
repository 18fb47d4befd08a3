"""`gradfuse.profiler.launches`: every launch's layers and direction against the kernel
listing's `fuses:` lines, and FLOPs against hand counts and torch.profiler."""

from __future__ import annotations

from math import prod
from pathlib import Path

import numpy as np
import pytest
from example_programs import load_example, record_mlp  # tests/unit (conftest puts it on the path)
from listing_origins import fuses as _fuses
from xdsl.dialects.builtin import ModuleOp

import gradfuse
from gradfuse import Feeder, Receiver, ir_for
from gradfuse.diagnostics import GradfuseError
from gradfuse.dump import dump_kernels
from gradfuse.frontend.parser import parse_tg
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline
from gradfuse.profiler import KernelWork, Launch, kernel_table, launches

ROOT = Path(__file__).resolve().parents[3]


def _kernels() -> ModuleOp:
    """The recorded program after the `kernels` pipeline."""
    module = program().module.clone()
    run_pipeline(module, "kernels")
    return module


def _check_origins(module: ModuleOp, unlayered: set[str] = frozenset()) -> list[Launch]:
    """Checks every kernel launch against the listing; a launch without a layer is
    allowed only where all its ops come from the `file:line`s of `unlayered`."""
    fuses = _fuses(dump_kernels(module))
    rows = launches(module)
    kernels = [r for r in rows if r.is_kernel]
    assert kernels
    members = [w.symbol for r in kernels for w in r.kernels]
    assert sorted(members) == sorted(fuses), "every kernel of the listing, each once"
    for r in kernels:
        want = set().union(*(fuses[w.symbol] for w in r.kernels))
        assert set(r.origins) == want, r.symbol
        assert r.layers or set(r.sources) <= unlayered, f"{r.symbol} has no layer"
        assert set(r.layers) == {path for path, _ in want if path is not None}
        assert set(r.shares) <= {d for _, d in want}
        assert abs(sum(r.shares.values()) - 1) < 1e-9
    return rows


def test_mlp_launches_match_the_listing() -> None:
    record_mlp(16, 2, 3)
    rows = _check_origins(_kernels())
    assert [r.op for r in rows if not r.is_kernel] == ["feeder", "receiver"]
    assert all(r.loops and r.loops[0].trips == 3 for r in rows if r.is_kernel)
    assert {d for r in rows for d in r.shares} == {"forward", "backward", "optimizer"}
    first = next(r for r in rows if r.is_kernel).kernels[0]  # Linear(16, 16) at batch 2
    assert first.kind == "contraction" and first.params == "[2, 16 | 16]"
    epilogue = first.flops - 2 * 2 * 16 * 16  # bias, sigmoid: a few ops per output
    assert 0 < epilogue <= 10 * 2 * 16
    table = kernel_table(rows)
    assert table.splitlines()[0].split()[:4] == ["Idx", "Direction", "Layer", "Op"]
    assert len(table.splitlines()) == len(rows) + 1


def test_dcgan_launches_match_the_listing() -> None:
    gradfuse.reset()
    load_example("dcgan", BATCH=2).record(steps=1, log_every=1)
    rows = _check_origins(_kernels())
    kinds = {r.op.split(":")[0] for r in rows}
    assert {"group", "rows", "contraction", "feeder", "receiver"} <= kinds
    group = next(r for r in rows if r.op.startswith("group"))
    assert len(group.kernels) > 1 and group.flops == sum(w.flops for w in group.kernels)


def test_transformer_launches_match_the_listing() -> None:
    gradfuse.reset()
    load_example("transformer").record(steps=4, log_every=2)
    # the loss module is called at top level (`loss_fn(model(ids), target)`): its ops
    # have no module path, in the listing as here (a profile names them `(no module)`);
    # its backward reads the targets where they are compared with each class
    lines = (ROOT / "examples" / "transformer.py").read_text().splitlines()
    loss = next(i for i, text in enumerate(lines, 1) if "loss_fn(model(" in text)
    target = next(i for i, text in enumerate(lines, 1) if "target = Feeder(" in text)
    unlayered = {f"transformer.py:{loss}", f"transformer.py:{target}"}
    rows = _check_origins(_kernels(), unlayered=unlayered)
    assert any(len(r.loops) == 2 for r in rows), "the inner loop of log_every - 1 steps"


def _two(m: int, k: int, n: int):
    a = Feeder(lambda: np.ones((m, k), np.float32), shape=[m, k], name="a")
    b = Feeder(lambda: np.ones((k, n), np.float32), shape=[k, n], name="b")
    return a, b


def _only_kernel() -> Launch:
    (row,) = [r for r in launches(_kernels()) if r.is_kernel]
    return row


def test_a_dot_counts_two_flops_per_multiply_add() -> None:
    gradfuse.reset()
    a, b = _two(3, 5, 7)
    Receiver(lambda y: None, a @ b, name="y")
    row = _only_kernel()
    assert row.op == "contraction" and row.flops == 2 * 3 * 5 * 7
    assert row.bytes_read == 4 * (3 * 5 + 5 * 7) and row.bytes_written == 4 * 3 * 7


def test_inner_flops_are_the_multiply_adds_without_the_fused_prologue() -> None:
    gradfuse.reset()
    a, b = _two(3, 5, 7)
    Receiver(lambda y: None, (a + 1.0) @ b, name="y")
    row = _only_kernel()
    (work,) = row.kernels
    assert row.op == "contraction" and work.params == "[3, 7 | 5]"
    assert work.flops == 3 * 3 * 5 * 7  # the addf runs at every point: addf, mulf, reduce
    assert work.inner_flops == 2 * 3 * 5 * 7  # torch's count of the matmul


def test_an_elementwise_chain_counts_ops_times_points() -> None:
    gradfuse.reset()
    a, b = _two(4, 4, 4)
    Receiver(lambda y: None, (a + b) * a - b, name="y")
    row = _only_kernel()
    assert row.op == "elementwise" and row.flops == 3 * 4 * 4
    assert row.bytes_read == 2 * 4 * 4 * 4 and row.bytes_written == 4 * 4 * 4


def test_a_reduction_counts_one_per_reduced_point() -> None:
    gradfuse.reset()
    a, _ = _two(4, 6, 1)
    Receiver(lambda y: None, (a * a).sum(1), name="y")
    row = _only_kernel()
    assert row.op == "reduction" and row.flops == 2 * 4 * 6  # mulf + reduce add
    assert row.kernels[0].params == "[4 | 6]" and row.bytes_written == 4 * 4


def test_a_transposed_convolution_counts_its_live_taps_as_torch_does() -> None:
    # stride 2: the dilated domain [2, 3, 8, 8 | 4, 4, 4] multiplies the input at one
    # tap in 4 (the others are 0 by the guard's phase); torch counts a transposed
    # convolution by its input: 2·N·Cin·H·W·Cout·KH·KW
    import gradfuse.nn.functional as F

    gradfuse.reset()
    x = Feeder(lambda: np.ones((2, 4, 4, 4), np.float32), shape=[2, 4, 4, 4], name="x")
    w = Feeder(lambda: np.ones((4, 3, 4, 4), np.float32), shape=[4, 3, 4, 4], name="w")
    Receiver(lambda y: None, F.conv_transpose2d(x, w, stride=2, padding=1), name="y")
    row = _only_kernel()
    (work,) = row.kernels
    assert row.op == "contraction"
    assert prod(work.domain) == 2 * 3 * 8 * 8 * 4 * 4 * 4  # the dilated domain
    assert work.inner_flops == 2 * 2 * 4 * 4 * 4 * 3 * 4 * 4


def test_a_loop_records_its_trip_count() -> None:
    gradfuse.reset()

    def step() -> None:
        a, b = _two(2, 2, 2)
        Receiver(lambda y: None, a + b, name="y")

    ir_for(range(5), step)
    (row,) = [r for r in launches(_kernels()) if r.is_kernel]
    assert row.loops[0].trips == 5 and row.executions == 5 and row.flops == 4


def _torch_flops(n: int, c: int, o: int, hw: int, f: int, h: int, w: int) -> dict[str, int]:
    """torch.profiler's `with_flops` counts of one Conv2d(c, o, 3, padding=1) and one
    Linear(f, h) (no biases), forward and backward of a sum of squares; torch counts
    the conv forward (`aten::conv2d`) and both matmuls (`aten::mm`), not conv backward."""
    torch = pytest.importorskip("torch")
    from torch.profiler import profile

    conv = torch.nn.Conv2d(c, o, 3, padding=1, bias=False)
    lin = torch.nn.Linear(f, h, bias=False)
    x, z = torch.randn(n, c, hw, hw), torch.randn(w, f)
    with profile(with_flops=True) as prof:
        y, u = conv(x), lin(z)
        ((y * y).sum() + (u * u).sum()).backward()
    return {e.key: e.flops for e in prof.key_averages() if e.flops}


def test_conv_and_matmul_flops_match_torch_profiler() -> None:
    n, c, o, hw, f, h, w = 4, 8, 16, 16, 32, 10, 6
    counted = _torch_flops(n, c, o, hw, f, h, w)
    gradfuse.reset()
    from gradfuse.nn import SGD, Conv2d, Linear, Module

    class Net(Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = Conv2d(c, o, 3, padding=1, bias=False)
            self.lin = Linear(f, h, bias=False)

        def forward(self, x: gradfuse.Tensor, z: gradfuse.Tensor) -> gradfuse.Tensor:
            y, u = self.conv(x), self.lin(z)
            return (y * y).sum() + (u * u).sum()

    net = Net()
    x = Feeder(lambda: np.ones((n, c, hw, hw), np.float32), shape=[n, c, hw, hw], name="x")
    z = Feeder(lambda: np.ones((w, f), np.float32), shape=[w, f], name="z")
    loss = net(x, z)
    loss.backward()
    SGD(net.parameters(), lr=0.1).step()
    Receiver(lambda v: None, loss, name="loss")
    works = [k for r in launches(_kernels()) for k in r.kernels if k.kind == "contraction"]

    def flops(layer: str, direction: str) -> int:  # of the contractions mostly in `direction`
        def main(k: KernelWork) -> str:
            return max(k.direction_weights, key=lambda d: k.direction_weights[d])

        return sum(k.inner_flops for k in works if layer in k.layers and main(k) == direction)

    conv_fwd, conv_bwd = flops("conv", "forward"), flops("conv", "backward")
    lin = flops("lin", "forward") + flops("lin", "backward")
    assert conv_fwd == 2 * n * o * hw * hw * c * 9 and lin == 2 * 2 * w * h * f
    assert abs(conv_fwd - counted["aten::conv2d"]) <= 0.01 * counted["aten::conv2d"]
    assert abs(lin - counted["aten::mm"]) <= 0.01 * counted["aten::mm"]
    assert conv_bwd == conv_fwd  # dW: the same multiply-adds, which torch leaves uncounted


@pytest.mark.parametrize("pipeline", [None, "default"])
def test_launches_of_a_module_that_is_not_kernel_ir_is_an_error(pipeline):
    module = parse_tg((ROOT / "examples" / "linreg.tg").read_text())
    if pipeline:
        run_pipeline(module, pipeline)
    with pytest.raises(GradfuseError, match="launches\\(\\) reads kernel IR"):
        launches(module)
