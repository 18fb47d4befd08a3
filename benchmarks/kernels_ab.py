"""The kernels a change changed, timed against the revision before it, taking turns.

On a shared machine a whole training step moves by 10-20 % between runs of the same
code, more than most changes to a few kernels; their own time in the step does not.
This benchmark profiles an example's training step (`gradfuse.profiler`, the c
backend) under two revisions of gradfuse, each in a process of its own, the two taking
turns for `--rounds` rounds: the base revision from a `git worktree`, and this tree as
it is. Kernels are matched by their C (`LoopRenderer`, the function's name left out):
a kernel's name is a counter (`k12`, `g139`) that shifts wherever a change fuses or
splits kernels before it, so a kernel is *unchanged* where the other revision has one
of the same C, under its own name or another, and *changed* where it has none (its C
differs, or a change fused, split, added or removed it); each side's changed kernels
are then its own. Each round prints, for both, the changed kernels' time a step and
all kernels' time a step; the last lines, the medians and their ratio, the changed
kernels' least time over the rounds, kernel by kernel (the host's load only adds), and
how many unchanged kernels were matched under other names; `--show N` also lists the N
matched kernels whose medians differ most (where a change reaches kernels through the
host program or the arena, not their C). On the developer Zen 3, one thread,
`kernel-pad-rows` against the tree before it (2026-12-07, the host loaded in round 2):

    python benchmarks/kernels_ab.py --base ac8bdc9 --model resnet18 --rounds 3 --show 2
    # round 1: base changed 49.85 ms, all 131.4 ms | head changed 37.59 ms, all 107.5 ms
    # round 2: base changed 47.54 ms, all 139.8 ms | head changed 53.37 ms, all 162.9 ms
    # round 3: base changed 40.15 ms, all 119.7 ms | head changed 37.47 ms, all 109.2 ms
    # changed kernels (base: g228 g352; head: g228 g352): 47.54 -> 37.59 ms a step
    #   (0.79x), all kernels 131.4 -> 109.2 ms a step (resnet18 b8, 1 thread(s), medians
    #   of 3 rounds)
    #   best rounds, kernel by kernel: 39.98 -> 37.23 ms a step
    #   k188: 2.548 -> 1.904 ms a step
    #   g186: 3.913 -> 3.349 ms a step

A change to fusion renames most kernels after the first it touches: fusing Adam's
update into DCGAN's weight-gradient contractions (an experiment, not kept) changed 39
kernels of the base and 36 of the head, and matched 28 others by their C under new
names (`g78 = g79`: base name = head name).

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
    from gradfuse.profiler import profile, schedule

    module = example(model, **SIZES[model])
    gradfuse.reset()
    module.record(steps=2 + ACTIVE, log_every=1, data=FixedBatch(module.Data()))
    compiled = gradfuse.compile("c")
    compiled.run()  # (library load, first touch of the buffers)
    with profile(schedule=schedule(wait=1, warmup=1, active=ACTIVE)) as prof:
        compiled.run()
    code = kernel_codes(compiled.program.module)
    times = {row.key: row.self_time_total_us / ACTIVE for row in prof.key_averages()}
    print(json.dumps({"times": {k: v for k, v in times.items() if k in code}, "code": code}))


def kernel_codes(module: object) -> dict[str, str]:
    """Each kernel function of a c-backend module (`cpu` pipeline), in program order: its
    name -> a hash of its C with the name left out (names are counters that shift)."""
    from gradfuse.backend.c.loop_render import LoopRenderer
    from gradfuse.passes.loops.loop_ir import kernel_functions

    renderer, code = LoopRenderer(), {}
    for fn in kernel_functions(module):  # type: ignore[arg-type]
        name = fn.sym_name.data
        text = renderer.kernel(fn).replace(f" {name}(", " kernel(", 1)
        code[name] = hashlib.sha256(text.encode()).hexdigest()
    return code


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
            pairs, changed = pair(got[0]["code"], got[1]["code"])
            sums = [
                (sum(r["times"].get(n, 0.0) for n in changed[i]), sum(r["times"].values()))
                for i, r in enumerate(got)
            ]
            print(
                f"round {k + 1}: base changed {sums[0][0] / 1e3:.2f} ms, all "
                f"{sums[0][1] / 1e3:.1f} ms | head changed {sums[1][0] / 1e3:.2f} ms, "
                f"all {sums[1][1] / 1e3:.1f} ms",
                flush=True,
            )
    part = [
        statistics.median(sum(r[i]["times"].get(n, 0.0) for n in changed[i]) for r in rounds) / 1e3
        for i in (0, 1)
    ]
    whole = [statistics.median(sum(r[i]["times"].values()) for r in rounds) / 1e3 for i in (0, 1)]
    ratio = f"{part[1] / part[0]:.2f}x" if part[0] else "no ratio"
    names = [" ".join(changed[i]) or "none" for i in (0, 1)]
    print(
        f"changed kernels (base: {names[0]}; head: {names[1]}): {part[0]:.2f} -> {part[1]:.2f}"
        f" ms a step ({ratio}), all kernels {whole[0]:.1f} -> {whole[1]:.1f} ms a step"
        f" ({args.model} b8, {args.threads} thread(s), medians of {args.rounds} rounds)"
    )
    best = [
        sum(min(r[i]["times"].get(n, 0.0) for r in rounds) for n in changed[i]) / 1e3
        for i in (0, 1)
    ]
    if changed[0] or changed[1]:  # each changed kernel's least time: the host's load adds
        print(f"  best rounds, kernel by kernel: {best[0]:.2f} -> {best[1]:.2f} ms a step")
    renamed = sum(a != b for a, b in pairs.items())
    if renamed:
        print(f"  {renamed} kernels with the same C under other names, matched by their C")
    medians = {
        (a, b): [
            statistics.median(r[i]["times"].get(n, 0.0) for r in rounds) / 1e3
            for i, n in ((0, a), (1, b))
        ]
        for a, b in pairs.items()
    }
    for a, b in sorted(medians, key=lambda k: -abs(medians[k][1] - medians[k][0]))[: args.show]:
        shown = a if a == b else f"{a} = {b}"
        print(f"  {shown}: {medians[a, b][0]:.3f} -> {medians[a, b][1]:.3f} ms a step")


def pair(base: dict[str, str], head: dict[str, str]) -> tuple[dict[str, str], list[list[str]]]:
    """Kernels of two revisions matched by their C (name -> hash of the C without the
    name, in program order): each base kernel with the head kernel of the same C, of the
    same name where there is one, else the first not yet matched. Returns the pairs
    (base name -> head name) and each side's kernels left over: the *changed* ones (C
    that differs, kernels that a change fused, split or added, names shifted or not)."""
    pairs = {name: name for name, sha in base.items() if head.get(name) == sha}
    by_code: dict[str, list[str]] = {}
    for name, sha in head.items():
        if name not in pairs:
            by_code.setdefault(sha, []).append(name)
    for name, sha in base.items():
        free = by_code.get(sha)
        if name not in pairs and free:
            pairs[name] = free.pop(0)
    matched = set(pairs.values())
    return pairs, [
        [n for n in base if n not in pairs],
        [n for n in head if n not in matched],
    ]


if __name__ == "__main__":
    main()
