"""Runs mutated `.tg` inputs through `ir-opt` and `ir-run` and judges each outcome.

The only acceptable outcomes: success, or exactly one located diagnostic
(`file:line:col: error: ...`, optionally followed by its source line and a caret)
with exit status 1 and no output file. Anything else is a failure: a traceback, an
"internal error", an unlocated or repeated diagnostic, a signal, a hang, a partial
output file, lines of another file in the diagnostic, or printed `.tg` that does
not read back to the same text.

`ir-opt` and `ir-run --backend reference` run in this process (a timer stops a
hang); `ir-run --backend c|lowered` runs in a subprocess for a sample of inputs
(a crash in compiled code must not take the fuzzer down).

    python tests/fuzz/harness.py            # GRADFUSE_FUZZ_COUNT (10000), GRADFUSE_FUZZ_SEED (0)
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from mutate import mutate, seeds  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TIMEOUT_S = 20.0
MAX_ELEMENTS = 2_000_000
"""ir-run is skipped (ir-opt runs instead) when a program would touch more elements."""
PIPELINES = [
    ["-p", "tg"], ["-p", "kernels", "-t", "kernels"], ["-p", "cpu", "-t", "c"],
    ["-p", "cuda", "-t", "cuda"], ["-p", "tg-fuse,convert-tg-to-kernel,kernel-plan-buffers", "-t", "mlir"],
    ["-t", "mlir"],
]  # fmt: skip
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: \S")
FOREIGN = ("root:x:0:0", "root:*:0:0")
"""The first line of /etc/passwd: a `loc("/etc/passwd":1:1)` must not print it."""


class Hang(BaseException):
    """Raised by the timer: the tool ran past TIMEOUT_S (not an `Exception`, so that
    no `except Exception` in the tools catches it)."""


@dataclass
class Outcome:
    """How one tool run on one input ended."""

    tool: str
    kind: str  # "ok", "diagnostic" or "failure"
    why: str = ""
    stderr: str = ""


@dataclass
class Summary:
    """Counts over a fuzz run, and the failing inputs."""

    inputs: int = 0
    runs: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    failures: list[tuple[str, list[str], str, Outcome]] = field(default_factory=list)

    def line(self, seed: int, seconds: float) -> str:
        tools = ", ".join(f"{k} {v}" for k, v in sorted(self.runs.items()))
        return (
            f"fuzz: seed {seed}: {self.inputs} inputs, {self.kinds['ok']} ok,"
            f" {self.kinds['diagnostic']} diagnostics, {self.kinds['failure']} failures"
            f" ({tools}) in {seconds:.0f} s"
        )


def judge(tool: str, rc: int, out: str, err: str, path: Path, output: Path) -> Outcome:
    """Classifies one run: exit status, stdout, stderr and the output file."""

    def fail(why: str) -> Outcome:
        return Outcome(tool, "failure", why, err)

    text = out + err
    if "Traceback" in text:
        return fail("traceback")
    if "internal" in err:
        return fail("internal error")
    if any(f in text for f in FOREIGN):
        return fail("printed lines of another file")
    if rc == 0:
        if not output.exists():
            return fail("exit 0 without an output file")
        return Outcome(tool, "ok")
    if rc != 1:
        return fail(f"exit status {rc}")
    if output.exists():
        return fail("partial output file")
    lines = err.rstrip("\n").split("\n")
    if sum("error:" in line for line in lines[:1]) != 1 or len(lines) not in (1, 3):
        return fail("not exactly one diagnostic")
    if len(lines) == 3 and not re.fullmatch(r" *\^", lines[2]):
        return fail("no caret under the source line")
    if not LOCATED.match(lines[0]):
        return fail("unlocated diagnostic")
    return Outcome(tool, "diagnostic", stderr=err)


def _alarm(signum, frame):  # noqa: ARG001
    raise Hang()


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def in_process(tool: str, argv: list[str], path: Path, output: Path) -> Outcome:
    """Runs `ir-opt` or `ir-run` (reference) in this process."""
    from gradfuse.tools import ir_opt, ir_run

    main = ir_opt.main if tool.startswith("ir-opt") else ir_run.main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _deadline(TIMEOUT_S):
            rc = main(argv)
    except Hang:
        return Outcome(tool, "failure", f"hang (over {TIMEOUT_S:.0f} s)")
    except BaseException as exc:  # noqa: BLE001 - what escapes the tool is the finding
        return Outcome(tool, "failure", f"escaped {type(exc).__name__}: {exc}"[:300])
    return judge(tool, rc, out.getvalue(), err.getvalue(), path, output)


def in_subprocess(tool: str, argv: list[str], path: Path, output: Path, env: dict) -> Outcome:
    """Runs a console script in a subprocess (for backends that run compiled code)."""
    try:
        done = subprocess.run(
            [str(BIN / tool.split()[0]), *argv], capture_output=True, text=True,
            timeout=TIMEOUT_S * 6, env=env, errors="replace",
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Outcome(tool, "failure", "hang (subprocess)")
    if done.returncode < 0:
        return Outcome(tool, "failure", f"signal {-done.returncode}", done.stderr)
    return judge(tool, done.returncode, done.stdout, done.stderr, path, output)


def roundtrip(printed: str) -> str | None:
    """Why printed `.tg` does not read back to itself, or None."""
    from gradfuse.frontend.parser import parse_tg
    from gradfuse.frontend.printer import print_tg

    try:
        again = print_tg(parse_tg(printed, "printed.tg"))
    except Exception as err:  # noqa: BLE001
        return f"printed .tg does not parse: {str(err)[:200]}"
    return None if again == printed else "print -> parse -> print differs"


def inputs_for(path: Path, npz: Path, limit: int) -> bool:
    """Writes arguments, feeder data and param values for the program at `path` into
    `npz`; False when it does not parse or is too big to run."""
    from xdsl.dialects.builtin import TensorType
    from xdsl.dialects.func import FuncOp

    from gradfuse.backend.interpreters.tg_ops import dtype_of
    from gradfuse.dialects import tg
    from gradfuse.frontend.parser import parse_tg

    try:
        module = parse_tg(path.read_text(errors="replace"), str(path))
    except Exception:  # noqa: BLE001 - the tool reports it
        return True
    rng = np.random.default_rng(0)

    def array(ty) -> np.ndarray:
        dtype = dtype_of(ty.element_type)
        return (rng.standard_normal(ty.get_shape()) * 2).astype(dtype)

    total, arrays = 0, {}
    for op in module.walk():
        trips = 1
        parent = op.parent_op()
        while parent is not None:
            if isinstance(parent, tg.ForOp):
                trips *= max(parent.trip_count, 1)
            parent = parent.parent_op()
        for ty in [r.type for r in op.results] + [
            a.type for r in op.regions for b in r.blocks for a in b.args
        ]:
            if isinstance(ty, TensorType):
                total += trips * math.prod(ty.get_shape())
        if total > limit:
            return False
        if isinstance(op, FuncOp) and op.sym_name.data == "main":
            for i, a in enumerate(op.body.block.args):
                if isinstance(a.type, TensorType):
                    arrays[f"arg{i}"] = array(a.type)
        if isinstance(op, tg.FeederOp | tg.ParamOp) and isinstance(op.result.type, TensorType):
            arrays.setdefault(op.key.data, array(op.result.type))
    try:
        np.savez(npz, **arrays)
    except Exception:  # noqa: BLE001 - a key numpy cannot store: run without inputs
        np.savez(npz)
    return True


def fuzz(count: int, seed: int, sample_every: int = 25, log=None) -> Summary:
    """Runs `count` mutants; every `sample_every`-th one that ran on the reference (a
    small program) also runs on c or lowered, in a subprocess."""
    rng = random.Random(seed)
    corpus = seeds(ROOT)
    summary = Summary()
    with tempfile.TemporaryDirectory(prefix="gradfuse-fuzz-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "GRADFUSE_CACHE_DIR": str(work / "cache")}
        path, output, npz = work / "in.tg", work / "out", work / "in.npz"
        runnable = 0
        for n in range(count):
            name, text = rng.choice(corpus)
            mutant, edits = mutate(text, rng)
            path.write_text(mutant, errors="surrogateescape")
            output.unlink(missing_ok=True)
            summary.inputs += 1
            pick = rng.random()
            outcomes = []
            if pick < 0.35:
                outcomes.append(in_process("ir-opt", [str(path), "-o", str(output)], path, output))
                if outcomes[-1].kind == "ok":
                    why = roundtrip(output.read_text())
                    if why:
                        outcomes[-1] = Outcome("ir-opt", "failure", why)
            elif pick < 0.65 or not inputs_for(path, npz, MAX_ELEMENTS):
                argv = [str(path), *rng.choice(PIPELINES), "-o", str(output)]
                outcomes.append(in_process("ir-opt " + argv[2], argv, path, output))
            else:
                run = [str(path), "--inputs", str(npz), "--outputs", str(output)]
                outcomes.append(in_process("ir-run reference", [*run, "--backend", "reference"],
                                           path, output))  # fmt: skip
                if outcomes[-1].kind != "failure" and inputs_for(path, npz, 20_000):
                    runnable += 1
                    if sample_every and runnable % sample_every == 0:
                        backend = "c" if runnable // sample_every % 2 else "lowered"
                        output.unlink(missing_ok=True)
                        outcomes.append(in_subprocess(f"ir-run {backend}",
                                        [*run, "--backend", backend], path, output, env))  # fmt: skip
            for o in outcomes:
                summary.runs[o.tool] += 1
            worst = next((o for o in outcomes if o.kind == "failure"), outcomes[-1])
            summary.kinds[worst.kind] += 1
            if worst.kind == "failure":
                summary.failures.append((name, edits, mutant, worst))
                if log:
                    log(
                        f"FAIL #{n} {name} {edits}: {worst.tool}: {worst.why}: {worst.stderr[:300]!r}"
                    )
    return summary


def main() -> int:
    """`make fuzz`: GRADFUSE_FUZZ_COUNT inputs from GRADFUSE_FUZZ_SEED; exit 1 on failures."""
    count = int(os.environ.get("GRADFUSE_FUZZ_COUNT", "10000"))
    seed = int(os.environ.get("GRADFUSE_FUZZ_SEED", "0"))
    keep = os.environ.get("GRADFUSE_FUZZ_KEEP")  # a folder to save failing inputs in
    start = time.monotonic()
    summary = fuzz(count, seed, log=lambda s: print(s, flush=True))
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for i, (_, _, mutant, _) in enumerate(summary.failures):
            (Path(keep) / f"fail{i:04d}.tg").write_text(mutant, errors="surrogateescape")
    print(summary.line(seed, time.monotonic() - start))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
