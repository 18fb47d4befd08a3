"""The bad-input corpus (tests/bad_inputs): every case gives exactly one diagnostic
`file:line:col: error: ...` (or `error: ...` without a position) and exit status 1,
never a Python traceback, and never an output file.

The cases call the tools' entry points (`main(argv)`, what the console scripts call)
in this process, with stdout and stderr captured: a process of its own per case spent
most of its time importing gradfuse (78 ir-opt cases: ~40 s of the unit tests). One
case of each tool still runs the installed console script in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import chdir, redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

from gradfuse.tools import ir_opt, ir_run

CORPUS = Path(__file__).resolve().parents[2] / "bad_inputs"
BIN = Path(sys.executable).parent
PROGRAMS = ("feed.tg", "args.tg")  # valid programs for the ir-run cases
TG_CASES = sorted(p for p in CORPUS.glob("*.tg") if p.name not in PROGRAMS)
RUN_CASES = json.loads((CORPUS / "ir_run_cases.json").read_text())
MAINS: dict[str, Callable[[Sequence[str]], int]] = {"ir-opt": ir_opt.main, "ir-run": ir_run.main}


def run(tool: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`tool args` in `cwd`, through its entry point in this process: its exit status and
    what it printed (an exception escaping `main` fails the test, as a traceback would)."""
    out, err = StringIO(), StringIO()
    with chdir(cwd), redirect_stdout(out), redirect_stderr(err):
        status = MAINS[tool](args)
    return subprocess.CompletedProcess([tool, *args], status, out.getvalue(), err.getvalue())


def run_script(tool: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`tool args` in `cwd`: the installed console script, in a process of its own."""
    return subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, cwd=cwd)


def check_one_diagnostic(done: subprocess.CompletedProcess, expect: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert expect in errors[0], f"{expect!r} not in {errors[0]!r}"


def test_the_corpus_is_big_enough():
    assert len(TG_CASES) + len(RUN_CASES) >= 40


def check_ir_opt(path: Path, out: Path, runner=run) -> None:
    """ir-opt on the corpus file `path`: one diagnostic at the line its first line names
    (`// EXPECT: line:col: error: ...`), with the line and a caret, and no `out`."""
    target = out / f"{path.stem}.out"
    done = runner("ir-opt", [str(path), "-o", str(target)], CORPUS)
    expect = path.read_bytes().decode("utf-8", "replace").splitlines()[0]
    check_one_diagnostic(done, f"{path.name}:{expect.removeprefix('// EXPECT: ')}")
    assert "^" in done.stderr  # the offending line and a caret
    assert not target.exists(), f"{path.name} left a partial output file"


@pytest.mark.parametrize("path", TG_CASES, ids=[p.name for p in TG_CASES])
def test_ir_opt_gives_one_located_diagnostic(path, tmp_path):
    check_ir_opt(path, tmp_path)


def test_the_ir_opt_script_gives_one_located_diagnostic(tmp_path):
    check_ir_opt(TG_CASES[0], tmp_path, run_script)


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


def check_ir_run(case: dict, ir_run_dir: Path, runner=run) -> None:
    """ir-run with the arguments of `case`: one diagnostic holding its `expect` (where that
    is a position, the offending line and a caret follow it) and no output file."""
    out = ir_run_dir / f"{case['name'].replace(' ', '_')}.npz"
    done = runner("ir-run", [*case["args"], "--outputs", str(out)], ir_run_dir)
    check_one_diagnostic(done, case["expect"])
    if case["expect"].startswith("feed.tg:"):  # a position: the offending line and a caret
        lines = done.stderr.splitlines()
        assert lines[1].strip().startswith("%x = tg.feeder") and lines[2].strip() == "^"
    assert not out.exists()


@pytest.mark.parametrize("case", RUN_CASES, ids=[c["name"] for c in RUN_CASES])
def test_ir_run_gives_one_diagnostic_and_no_output(case, ir_run_dir):
    check_ir_run(case, ir_run_dir)


def test_the_ir_run_script_gives_one_diagnostic_and_no_output(ir_run_dir):
    located = next(c for c in RUN_CASES if c["expect"].startswith("feed.tg:"))
    check_ir_run(located, ir_run_dir, run_script)
