"""The bad-input corpus (tests/bad_inputs): every case gives exactly one diagnostic
`file:line:col: error: ...` (or `error: ...` without a position) and exit status 1,
never a Python traceback, and never an output file."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

CORPUS = Path(__file__).resolve().parents[2] / "bad_inputs"
BIN = Path(sys.executable).parent
PROGRAMS = ("feed.tg", "args.tg")  # valid programs for the ir-run cases
TG_CASES = sorted(p for p in CORPUS.glob("*.tg") if p.name not in PROGRAMS)
RUN_CASES = json.loads((CORPUS / "ir_run_cases.json").read_text())


def run(tool: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, cwd=cwd)


def check_one_diagnostic(done: subprocess.CompletedProcess, expect: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert expect in errors[0], f"{expect!r} not in {errors[0]!r}"


def test_the_corpus_is_big_enough():
    assert len(TG_CASES) + len(RUN_CASES) >= 40


@pytest.fixture(scope="module")
def ir_opt_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ir-opt")

    def one(path: Path):
        target = out / f"{path.stem}.out"
        return path, target, run("ir-opt", [str(path), "-o", str(target)], CORPUS)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, TG_CASES))


def test_ir_opt_gives_one_located_diagnostic(ir_opt_results):
    for path, target, done in ir_opt_results:
        expect = path.read_bytes().decode("utf-8", "replace").splitlines()[0]
        expect = expect.removeprefix("// EXPECT: ")
        check_one_diagnostic(done, f"{path.name}:{expect}")
        assert "^" in done.stderr  # the offending line and a caret
        assert not target.exists(), f"{path.name} left a partial output file"


@pytest.fixture(scope="module")
def ir_run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ir-run")
    for p in [*(CORPUS / name for name in PROGRAMS), *TG_CASES]:
        (d / p.name).write_bytes(p.read_bytes())
    x = np.ones((2, 3), np.float32)
    np.savez(d / "good.npz", x=x)
    np.savez(d / "wrong_shape.npz", x=np.ones((3, 2), np.float32))
    np.savez(d / "float64.npz", x=np.ones((2, 3)))
    np.savez(d / "int32.npz", x=np.ones((2, 3), np.int32))
    np.savez(d / "strings.npz", x=np.array([["a", "b", "c"], ["d", "e", "f"]]))
    np.savez(d / "other.npz", y=x)
    np.savez(d / "arg_good.npz", arg0=x)
    np.savez(d / "arg_wrong_shape.npz", arg0=np.ones((3, 2), np.float32))
    np.savez(d / "arg_strings.npz", arg0=np.array([["a", "b", "c"], ["d", "e", "f"]]))
    np.savez(d / "params.npz", w=x)
    np.savez(d / "wrong_params.npz", w=np.ones(3, np.float32))
    (d / "garbage.npz").write_bytes(b"PK\x03\x04 this is not a zip archive at all")
    return d


@pytest.mark.parametrize("case", RUN_CASES, ids=[c["name"] for c in RUN_CASES])
def test_ir_run_gives_one_diagnostic_and_no_output(case, ir_run_dir):
    out = ir_run_dir / f"{case['name'].replace(' ', '_')}.npz"
    done = run("ir-run", [*case["args"], "--outputs", str(out)], ir_run_dir)
    check_one_diagnostic(done, case["expect"])
    if case["expect"].startswith("feed.tg:"):  # a position: the offending line and a caret
        lines = done.stderr.splitlines()
        assert lines[1].strip().startswith("%x = tg.feeder") and lines[2].strip() == "^"
    assert not out.exists()
