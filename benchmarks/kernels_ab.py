"""The kernels a change changed, timed against the revision before it, taking turns.

On a shared machine a whole training step moves by 10-20 % between runs of the same
code, more than most changes to a few kernels; their own time in the step does not.
This benchmark profiles an example's training step (`gradfuse.profiler`, the c
backend) under two revisions of gradfuse, each in a process of its own, the two taking
turns for `--rounds` rounds: the base revision from a `git worktree`, and this tree as
it is. Kernels are matched by name; one is *changed* where its C differs between the
two (`LoopRenderer`). Each round prints, for both, the changed kernels' time a step
and all kernels' time a step; the last line, the medians and their ratio; `--show N`
also lists the N kernels whose medians differ most (where a change reaches kernels
through the host program or the arena, not their C), and the changed kernels' least
time over the rounds, kernel by kernel (the host's load only adds). On the developer
Zen 3, one thread, `kernel-pad-rows` against the tree before it (2026-12-07):

    python benchmarks/kernels_ab.py --base ac8bdc9 --model resnet18 --rounds 6 --show 2
    # round 1: base changed 39.97 ms, all 110.2 ms | head changed 35.68 ms, all 105.4 ms
    # (rounds 2-5)
    # round 6: base changed 40.67 ms, all 127.7 ms | head changed 54.82 ms, all 168.8 ms
    # changed kernels (g228 g352): 36.73 -> 37.01 ms a step (1.01x), all kernels 109.1 ->
    #   107.0 ms a step (resnet18 b8, 1 thread(s), medians of 6 rounds)
    #   best rounds, kernel by kernel: 36.39 -> 35.68 ms a step
    #   g352: 5.613 -> 6.062 ms a step (changed)
    #   g121: 3.149 -> 2.911 ms a step

The examples are this tree's (`benchmarks/convnets.py`), at batch 8 (ResNet-18 at 64 x
64), with a fixed batch; a step's kernel times are the average of 4 profiled steps.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"dcgan": {"BATCH": 8}, "resnet18": {"BATCH": 8, "IMAGE": 64, "NUM_CLASSES": 10}}
ACTIVE = 4  # profiled steps, after one to wait and one to warm up


def child(model: str) -> None:
    """(In the revision's process.) Prints the step's kernel times and each kernel's C hash
    as JSON."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from convnets import FixedBatch, example

    import gradfuse
    from gradfuse.backend.c.loop_render import LoopRenderer
    from gradfuse.passes.loops.loop_ir import kernel_functions
    from gradfuse.profiler import profile, schedule

    module = example(model, **SIZES[model])
    gradfuse.reset()
    module.record(steps=2 + ACTIVE, log_every=1, data=FixedBatch(module.Data()))
    compiled = gradfuse.compile("c")
    compiled.run()  # (library load, first touch of the buffers)
    with profile(schedule=schedule(wait=1, warmup=1, active=ACTIVE)) as prof:
        compiled.run()
    renderer = LoopRenderer()
    code = {
        fn.sym_name.data: hashlib.sha256(renderer.kernel(fn).encode()).hexdigest()
        for fn in kernel_functions(compiled.program.module)
    }
    times = {row.key: row.self_time_total_us / ACTIVE for row in prof.key_averages()}
    print(json.dumps({"times": {k: v for k, v in times.items() if k in code}, "code": code}))


@contextmanager
def worktree(rev: str | None) -> Iterator[Path | None]:
    """A `git worktree` of this checkout at `rev`, removed afterwards (None for None)."""
    if rev is None:
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        git = ["git", "-C", str(ROOT), "worktree"]
        added = subprocess.run(
            [*git, "add", "-q", "--detach", str(tree), rev], capture_output=True, text=True
        )
        if added.returncode != 0:
            raise SystemExit(f"--base {rev}: no worktree of it ({added.stderr.strip()})")
        try:
            yield tree
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=False)


def child_json(tree: Path, script: str, args: list[str], doing: str, **env: str) -> dict:
    """The JSON that `script --child ARGS` prints last, run with gradfuse imported from
    `tree` and `env` added to the environment; `doing` names it in the error."""
    done = subprocess.run(
        [sys.executable, script, "--child", *args],
        env=dict(os.environ, PYTHONPATH=str(tree), **env),
        cwd=tempfile.gettempdir(),  # (not a checkout's root: `import gradfuse` finds `tree`)
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{doing} with gradfuse from {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(tree: Path, model: str, threads: int) -> dict:
    """The child's JSON, gradfuse imported from `tree`."""
    return child_json(tree, __file__, [model], f"profiling {model}", OMP_NUM_THREADS=str(threads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="the revision to compare against (required)")
    parser.add_argument("--model", choices=sorted(SIZES), default="resnet18")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--show", type=int, default=0, help="also list the N kernels whose medians differ most"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if not args.base:
        parser.error("--base REV is required: the revision to compare this tree against")
    with worktree(args.base) as base:
        assert base is not None
        rounds = []
        for k in range(args.rounds):
            got = [measure(tree, args.model, args.threads) for tree in (base, ROOT)]
            rounds.append(got)
            changed = sorted(
                name for name, sha in got[0]["code"].items() if got[1]["code"].get(name, sha) != sha
            )
            sums = [
                (sum(r["times"].get(n, 0.0) for n in changed), sum(r["times"].values()))
                for r in got
            ]
            print(
                f"round {k + 1}: base changed {sums[0][0] / 1e3:.2f} ms, all "
                f"{sums[0][1] / 1e3:.1f} ms | head changed {sums[1][0] / 1e3:.2f} ms, "
                f"all {sums[1][1] / 1e3:.1f} ms",
                flush=True,
            )
    only = set(rounds[0][0]["code"]) ^ set(rounds[0][1]["code"])
    part = [
        statistics.median(sum(r[i]["times"].get(n, 0.0) for n in changed) for r in rounds) / 1e3
        for i in (0, 1)
    ]
    whole = [statistics.median(sum(r[i]["times"].values()) for r in rounds) / 1e3 for i in (0, 1)]
    ratio = f"{part[1] / part[0]:.2f}x" if part[0] else "no ratio"
    print(
        f"changed kernels ({' '.join(changed) or 'none'}): {part[0]:.2f} -> {part[1]:.2f} ms a"
        f" step ({ratio}), all kernels {whole[0]:.1f} -> {whole[1]:.1f} ms a step"
        f" ({args.model} b8, {args.threads} thread(s), medians of {args.rounds} rounds)"
    )
    best = [
        sum(min(r[i]["times"].get(n, 0.0) for r in rounds) for n in changed) / 1e3 for i in (0, 1)
    ]
    if changed:  # the least time of each changed kernel over the rounds: the host's load adds
        print(f"  best rounds, kernel by kernel: {best[0]:.2f} -> {best[1]:.2f} ms a step")
    if only:
        print(f"kernels in one revision only (not matched): {' '.join(sorted(only))}")
    both = set(rounds[0][0]["times"]) & set(rounds[0][1]["times"])
    medians = {
        n: [statistics.median(r[i]["times"].get(n, 0.0) for r in rounds) / 1e3 for i in (0, 1)]
        for n in both
    }
    for n in sorted(medians, key=lambda n: -abs(medians[n][1] - medians[n][0]))[: args.show]:
        mark = " (changed)" if n in changed else ""
        print(f"  {n}: {medians[n][0]:.3f} -> {medians[n][1]:.3f} ms a step{mark}")


if __name__ == "__main__":
    main()
