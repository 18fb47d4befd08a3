"""The pass registry keeps its promises: every flag is a pass of that name, in the
stage folder of the IR it works on, with a FileCheck golden test named after the flag;
the helpers in passes/lib are no passes; the named pipelines name registered flags."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from xdsl.passes import ModulePass

from gradfuse.passes import PASSES, PIPELINES, expand

ROOT = Path(__file__).resolve().parents[3]
PASSES_DIR = ROOT / "gradfuse" / "passes"
GOLDEN = ROOT / "tests" / "filecheck" / "passes"


@pytest.mark.parametrize("flag", sorted(PASSES))
def test_every_flag_is_a_pass_of_its_name_with_a_golden_test(flag: str) -> None:
    cls = PASSES[flag]()
    assert issubclass(cls, ModulePass) and cls.name == flag
    assert any((GOLDEN / f"{flag}.{ext}").exists() for ext in ("tg", "mlir")), flag
    module = cls.__module__
    if flag not in ("canonicalize", "cse", "dce"):
        stage, _ = module.removeprefix("gradfuse.passes.").split(".")
        # the IR it works on: tg-* in tg/, kernel-* in kernel/, convert-x-to-y in y/
        want = flag.split("-")[-1] if flag.startswith("convert-") else flag.split("-")[0]
        assert stage == want, (flag, module)


def test_no_helper_defines_a_pass() -> None:
    for path in sorted((PASSES_DIR / "lib").glob("*.py")):
        tree = ast.parse(path.read_text())
        bases = [
            getattr(b, "id", getattr(b, "attr", ""))
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for b in node.bases
        ]
        assert "ModulePass" not in bases, path.name
        importlib.import_module(f"gradfuse.passes.lib.{path.stem}")


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipelines_name_registered_flags(name: str) -> None:
    assert all(flag in PASSES for flag in expand(name).split(","))
