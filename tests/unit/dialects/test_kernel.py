"""The kernel dialect in Python: the ops of a fused program, as `tg-fuse` builds them
for the seed MLP, verify, print and parse back; every op is documented."""

from __future__ import annotations

import io

import pytest
from xdsl.context import Context
from xdsl.dialects import get_all_dialects
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.printer import Printer

from gradfuse.dialects import kernel as kd
from gradfuse.dialects.tg import TG
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

SEED = """
func @main() {
  tg.for %i = 0 to 3 step 1 {
    %x = tg.feeder "x" : tensor<2x8xf32>
    %w = tg.param "w" init=0.5 : tensor<8x8xf32>
    %y = tg.dot %x, %w : tensor<2x8xf32>
    %s = tg.sigmoid %y : tensor<2x8xf32>
    %g = tg.grad %s wrt %w : tensor<8x8xf32>
    %lr = tg.constant -0.01 : tensor<8x8xf32>
    %d = tg.mul %g, %lr : tensor<8x8xf32>
    %n = tg.add %w, %d : tensor<8x8xf32>
    tg.assign "w", %n
    tg.yield
  }
  return
}
"""


def kernels_of(text: str) -> ModuleOp:
    module = parse_tg(text)
    run_pipeline(module, "kernels")
    return module


def test_fused_programs_verify_and_round_trip_through_mlir_text() -> None:
    module = kernels_of(SEED)
    module.verify()
    kernels = [op for op in module.walk() if isinstance(op, kd.KernelOp)]
    assert kernels and {k.kind.data for k in kernels} <= set(kd.KINDS)
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    ctx = Context()
    for name, dialect in get_all_dialects().items():
        ctx.register_dialect(name, dialect)
    ctx.register_dialect("tg", lambda: TG)
    ctx.register_dialect("kernel", lambda: kd.KERNEL)
    again = Parser(ctx, out.getvalue()).parse_module()
    again.verify()
    out2 = io.StringIO()
    Printer(stream=out2).print_op(again)
    assert out2.getvalue() == out.getvalue()


OPS = list(kd.KERNEL.operations)


@pytest.mark.parametrize("op", OPS, ids=[o.name for o in OPS])
def test_every_kernel_op_is_named_kernel_and_has_a_docstring(op) -> None:
    assert op.name.startswith("kernel.")
    assert op.__doc__ and op.__doc__.strip()
