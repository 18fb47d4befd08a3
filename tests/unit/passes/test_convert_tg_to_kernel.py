"""tg-fuse writes its decisions as `tg.fusion` regions that verify and print as MLIR;
convert-tg-to-kernel makes the same kernels from that text as from memory, and no tg
op is left in kernel IR."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from fusion_programs import programs
from hypothesis import HealthCheck, given, settings
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from gradfuse.dialects import tg
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import make_context, run_pipeline

ROOT = Path(__file__).resolve().parents[3]
DECIDE = "tg,tg-loop-state,tg-lower-access,cse,dce,tg-fuse"
SOURCES = {
    "mlp": ROOT / "tests/filecheck/passes/tg-fuse.tg",
    "linreg": ROOT / "examples/linreg.tg",
    "rows": ROOT / "tests/filecheck/passes/pipeline-kernels.tg",
}


def _text(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def parse_mlir(text: str) -> ModuleOp:
    return Parser(make_context(), text).parse_module()


def _both_ways(source: str) -> tuple[str, str]:
    """(kernels from the module in memory, kernels from tg-fuse's printed output)."""
    module = parse_tg(source)
    run_pipeline(module, DECIDE)
    module.verify()
    parsed = Parser(make_context(), _text(module)).parse_module()
    parsed.verify()
    run_pipeline(module, "convert-tg-to-kernel")
    run_pipeline(parsed, "convert-tg-to-kernel")
    return _text(module), _text(parsed)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_printed_decisions_give_the_same_kernels(name):
    source = SOURCES[name].read_text()
    decided = parse_tg(source)
    run_pipeline(decided, DECIDE)
    assert any(isinstance(op, tg.FusionOp) for op in decided.walk())
    memory, text = _both_ways(source)
    assert memory == text
    assert "tg." not in memory


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_give_the_same_kernels(source):
    memory, text = _both_ways(source)
    assert memory == text
    assert not any(op.dialect_name() == "tg" for op in parse_mlir(memory).walk())


def test_fusion_verifier_speaks_of_the_fusion():
    module = parse_tg(SOURCES["linreg"].read_text())
    run_pipeline(module, DECIDE)
    fusion = next(op for op in module.walk() if isinstance(op, tg.FusionOp))
    fusion.properties["kind"] = StringAttr("bogus")
    with pytest.raises(VerifyException, match="tg.fusion: kind must be one of"):
        fusion.verify()


@pytest.mark.parametrize("backend", ["numpy", "lowered", "c"])
def test_a_param_assigned_after_a_dead_read_is_still_a_buffer(backend):
    """`p * 2` unused, then `p.assign(...)`: dce removes the read that declared p (a read
    without init is pure), and the kernels still write p (the hoist declares it from the
    assign; a KeyError before, found by DistributedDataParallel's buffer broadcast on a
    rank that does not read its buffers)."""
    import gradfuse
    from gradfuse import ir_for
    from gradfuse.nn import Parameter

    gradfuse.reset()
    p = Parameter(np.ones(3, np.float32))

    def step() -> None:
        _ = p * 2.0
        p.assign(gradfuse.constant(np.arange(3.0)))

    ir_for(range(2), step)
    gradfuse.execute(backend=backend)
    np.testing.assert_array_equal(p.data, np.arange(3.0, dtype=np.float32))
    gradfuse.reset()
