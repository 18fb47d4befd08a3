"""How long recording takes: each example's training step traced through the Python API
into `tg` IR, under this tree and a base revision, taking turns.

Recording runs each time a script or a test runs, before anything is compiled: it is
the user's first wait. This benchmark records examples/transformer.py (four steps),
examples/dcgan.py at batch 8 (one step) and examples/resnet18.py at batch 2, 64 x 64
(three steps), each `--repeats` times in a process of its own (the least time counts),
under `--base REV` (a `git worktree`) and this tree as it is, for `--rounds` rounds; it
prints each round's times and, last, the least of all rounds and their ratio. On the developer
Zen 3 (2026-12-07), against the tree before `find_param` kept its params and the
recorder what it derives per code object and file (c3ac990), and before the recorder's
part alone (a3af3df):

    python benchmarks/trace.py --base c3ac990 --rounds 3
    # round 1 base: transformer 0.753 s, dcgan 0.633 s, resnet18 1.477 s
    # round 1 head: transformer 0.281 s, dcgan 0.330 s, resnet18 0.575 s
    # (rounds 2-3)
    # transformer: 0.732 -> 0.281 s (2.60x faster)
    # dcgan: 0.588 -> 0.322 s (1.83x faster)
    # resnet18: 1.381 -> 0.562 s (2.46x faster)
    python benchmarks/trace.py --base a3af3df --rounds 2
    # transformer: 0.441 -> 0.282 s (1.56x faster)
    # dcgan: 0.415 -> 0.323 s (1.28x faster)
    # resnet18: 0.756 -> 0.571 s (1.32x faster)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kernels_ab import ROOT, child_json, worktree  # benchmarks/kernels_ab.py

EXAMPLES = {  # name -> (module constants, steps)
    "transformer": ({}, 4),
    "dcgan": ({"BATCH": 8}, 1),
    "resnet18": ({"BATCH": 2, "IMAGE": 64, "NUM_CLASSES": 10}, 3),
}


def child(repeats: int) -> None:
    """(In the revision's process.) Prints each example's least recording time as JSON."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from convnets import example

    import gradfuse

    least: dict[str, float] = {}
    for name, (sizes, steps) in EXAMPLES.items():
        module = example(name, **sizes)
        for _ in range(repeats):
            gradfuse.reset()
            start = time.perf_counter()
            module.record(steps=steps, log_every=steps)
            took = time.perf_counter() - start
            least[name] = min(least.get(name, took), took)
    gradfuse.reset()
    print(json.dumps(least))


def measure(tree: Path, repeats: int) -> dict[str, float]:
    return child_json(tree, __file__, [str(repeats)], "recording the examples")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="the revision to compare against (default: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="recordings a process")
    args = parser.parse_args()
    best: dict[str, dict[str, float]] = {"base": {}, "head": {}}
    with worktree(args.base) as base:
        trees = {"head": ROOT} if base is None else {"base": base, "head": ROOT}
        for r in range(1, args.rounds + 1):
            for side, tree in trees.items():
                got = measure(tree, args.repeats)
                for name, seconds in got.items():
                    best[side][name] = min(best[side].get(name, seconds), seconds)
                shown = ", ".join(f"{k} {v:.3f} s" for k, v in got.items())
                print(f"round {r} {side}: {shown}", flush=True)
    for name in EXAMPLES:
        head = best["head"][name]
        if name in best["base"]:
            was = best["base"][name]
            print(f"{name}: {was:.3f} -> {head:.3f} s ({was / head:.2f}x faster)")
        else:
            print(f"{name}: {head:.3f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]))
    else:
        main()
