"""Prints what the compiler makes of a fixed set of programs, for restructurings that must
keep generated code byte-identical: the IR after each named pipeline, the kernel listing,
and the C and CUDA source, for every example and the random programs that once failed.

    python tests/dump_pipelines.py /tmp/before     # one file per program and stage
    ... restructure ...
    python tests/dump_pipelines.py /tmp/after
    diff -r /tmp/before /tmp/after                 # nothing, or only renamed passes

It also prints one SHA-256 per file and one over all of them.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "unit"))
sys.path.insert(0, str(HERE / "unit" / "frontend"))

from example_programs import load_example  # noqa: E402

import gradfuse  # noqa: E402

STAGES = {  # file suffix -> ir-opt arguments
    "tg.tg": ["-p", "tg"],
    "kernels.tg": ["-p", "kernels"],
    "listing.txt": ["-p", "kernels", "-t", "kernels"],
    "default.tg": ["-p", "default"],
    "cuda.tg": ["-p", "cuda"],
    "cpu.tg": ["-p", "cpu"],
    "c.c": ["-p", "cpu", "-t", "c"],
    "cuda.cu": ["-p", "cuda", "-t", "cuda"],
}
EXAMPLES = {  # name -> (example, its sizes, steps, log_every)
    "transformer": ({}, 4, 2),
    "dcgan": ({"BATCH": 8}, 1, 1),
    "resnet18": ({"BATCH": 2, "IMAGE": 32, "NUM_CLASSES": 10}, 1, 1),
}


def programs() -> dict[str, str]:
    """The .tg text of each program, by name."""
    from example_programs import record_mlp
    from random_programs import record
    from test_random_programs import REGRESSIONS

    texts = {"linreg": (HERE.parent / "examples" / "linreg.tg").read_text()}
    record_mlp(255, 2, 10)
    texts["mlp"] = gradfuse.ir_text()
    for name, (sizes, steps, log_every) in EXAMPLES.items():
        gradfuse.reset()
        load_example(name, **sizes).record(steps=steps, log_every=log_every)
        texts[name] = gradfuse.ir_text()
    for k, spec in enumerate(REGRESSIONS):
        gradfuse.reset()
        record(spec, "")
        texts[f"random{k:02d}"] = gradfuse.ir_text()
    gradfuse.reset()
    return texts


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "pipeline-dump")
    out.mkdir(parents=True, exist_ok=True)
    ir_opt = str(Path(sys.executable).parent / "ir-opt")
    jobs = []
    for name, text in programs().items():
        source = out / f"{name}.input.tg"
        source.write_text(text)
        jobs += [(name, suffix, source, args) for suffix, args in STAGES.items()]

    def run(job: tuple[str, str, Path, list[str]]) -> tuple[str, bytes]:
        name, suffix, source, args = job
        done = subprocess.run([ir_opt, str(source), *args], capture_output=True)
        text = done.stdout if done.returncode == 0 else b"error: " + done.stderr
        (out / f"{name}.{suffix}").write_bytes(text)
        return f"{name}.{suffix}", text

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = sorted(pool.map(run, jobs))
    total = hashlib.sha256()
    for file, text in results:
        digest = hashlib.sha256(text).hexdigest()
        total.update(f"{file} {digest}\n".encode())
        print(f"{digest[:16]}  {file}")
    print(f"{total.hexdigest()}  all {len(results)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
