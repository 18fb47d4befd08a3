"""The mutation fuzzer (tests/fuzz) in `make test`: a fixed seed, a few hundred inputs.

`make fuzz` runs the same harness on 10,000 inputs (GRADFUSE_FUZZ_COUNT,
GRADFUSE_FUZZ_SEED). Every input must end in success or exactly one located
diagnostic with exit status 1 (see `harness.judge`).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))

from harness import ROOT, fuzz, judge  # noqa: E402
from mutate import mutate, seeds  # noqa: E402

COUNT = 300


def test_the_seeds_are_every_tg_file_of_the_repository() -> None:
    names = {name.split("#")[0] for name, _ in seeds(ROOT)}
    assert "examples/linreg.tg" in names
    assert "tests/filecheck/passes/tg-fuse.tg" in names
    assert "tests/bad_inputs/op_15_dot.tg" in names


def test_mutations_change_the_text_and_say_how() -> None:
    rng = random.Random(0)
    corpus = seeds(ROOT)
    kinds = set()
    for _ in range(200):
        _, text = rng.choice(corpus)
        mutant, edits = mutate(text, rng)
        kinds.update(e.split("->")[0].split(" ")[0] for e in edits)
    assert {"number", "type", "op", "key", "nest-loops", "truncate"} <= kinds


def test_the_judge_accepts_one_located_diagnostic_only(tmp_path: Path) -> None:
    src, out = tmp_path / "a.tg", tmp_path / "out"
    located = "a.tg:3:5: error: tg.dot: inner dimensions differ\n  %y = tg.dot\n    ^\n"
    assert judge("ir-opt", 1, "", located, src, out).kind == "diagnostic"
    bad = [
        (1, "error: no position\n"),
        (1, located + located),
        (1, "a.tg:1:1: error: internal compiler error: KeyError\n"),
        (1, "Traceback (most recent call last):\n"),
        (-11, ""),
        (0, ""),  # success without the output file
    ]
    for rc, err in bad:
        assert judge("ir-opt", rc, "", err, src, out).kind == "failure", err
    out.write_text("partial")
    assert judge("ir-opt", 1, "", located, src, out).why == "partial output file"


def test_a_few_hundred_mutants_end_in_success_or_one_located_diagnostic() -> None:
    summary = fuzz(COUNT, seed=0, sample_every=20)
    report = "\n".join(
        f"{name} {edits}: {o.tool}: {o.why}\n{o.stderr}\n--- input:\n{text[:2000]}"
        for name, edits, text, o in summary.failures[:5]
    )
    assert not summary.failures, report
    assert summary.inputs == COUNT
    assert summary.kinds["ok"] > 20 and summary.kinds["diagnostic"] > 100
    assert summary.runs["ir-run reference"] > 50
    assert summary.runs["ir-run c"] + summary.runs["ir-run lowered"] >= 1
