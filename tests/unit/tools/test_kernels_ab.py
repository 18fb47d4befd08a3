"""benchmarks/kernels_ab.py matches two revisions' kernels by their C, not by their names
(counters that shift wherever a change fuses or splits kernels before them)."""

from __future__ import annotations

import sys
from pathlib import Path

from example_programs import record_mlp  # tests/unit (conftest puts it on the path)
from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, ModuleOp, StringAttr

import gradfuse
from gradfuse.frontend.recorder import program
from gradfuse.passes import run_pipeline
from gradfuse.passes.loops.loop_ir import kernel_functions

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from kernels_ab import kernel_codes, pair  # noqa: E402


def mlp_loops() -> ModuleOp:
    """The seed MLP's training loop (examples/mlp.py at 16 x 2) through the c backend's
    `cpu` pipeline."""
    record_mlp(16, 2, 2)
    module = program().module.clone()
    gradfuse.reset()
    run_pipeline(module, "cpu")
    return module


def test_a_renamed_kernel_keeps_its_code_and_is_matched_under_its_new_name() -> None:
    module = mlp_loops()
    before = kernel_codes(module)
    assert len(before) >= 2 and len(set(before.values())) == len(before)
    fn = next(iter(kernel_functions(module)))
    old = fn.sym_name.data
    fn.sym_name = StringAttr("renamed")
    after = kernel_codes(module)
    assert after["renamed"] == before[old] and old not in after
    pairs, changed = pair(before, after)
    assert pairs[old] == "renamed"
    assert all(pairs[n] == n for n in before if n != old)
    assert changed == [[], []]


def test_a_kernel_whose_c_differs_is_changed_on_both_sides() -> None:
    module = mlp_loops()
    before = kernel_codes(module)
    fn = next(
        f for f in kernel_functions(module)
        if any(isinstance(o, arith.ConstantOp) and isinstance(o.value, FloatAttr) for o in f.walk())
    )  # fmt: skip
    const = next(
        o for o in fn.walk() if isinstance(o, arith.ConstantOp) and isinstance(o.value, FloatAttr)
    )
    const.properties["value"] = FloatAttr(const.value.value.data + 1.0, const.value.type)
    after = kernel_codes(module)
    name = fn.sym_name.data
    assert after[name] != before[name]
    pairs, changed = pair(before, after)
    assert changed == [[name], [name]]
    assert name not in pairs and len(pairs) == len(before) - 1


def test_equal_kernels_pair_by_name_first_and_fused_ones_are_changed() -> None:
    """Two kernels of one C keep their own names where both sides have them; a kernel
    that a change fused into another (its C on one side only) is changed there."""
    base = {"k0": "a", "k1": "b", "k2": "b", "g3": "c", "k4": "d"}
    head = {"k0": "a", "k2": "b", "k3": "b", "g5": "e", "k6": "d"}
    pairs, changed = pair(base, head)
    assert pairs == {"k0": "k0", "k1": "k3", "k2": "k2", "k4": "k6"}
    assert changed == [["g3"], ["g5"]]
