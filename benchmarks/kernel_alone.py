"""One kernel's C alone, in a loop of its own: its time a call, under two revisions.

In the program a kernel shares the caches, the memory bus and the host's noise with
the rest of the step; alone, what a change to its C did shows within a few per cent.
This benchmark takes named kernels of an example's training step (`--model`, batch
8 as in `kernels_ab.py`, the c backend's `cpu` pipeline), writes each as a C program
of its own (the kernel's function as the program has it, its buffers allocated and
filled with values in [-1, 1), and a loop that calls it `--calls` times and prints the
least time of a call), builds it with the c backend's gcc flags, and runs it
`--rounds` times; with `--base REV`, the same kernel under REV (a `git worktree`) too,
the two taking turns. `--cold` writes 64 MB before each call, so that the kernel's
buffers come from memory, as in a step where other kernels ran in between. On the
developer Zen 3, one thread, `kernel-pad-rows` against the tree before it (2026-12-07):

    python benchmarks/kernel_alone.py --model dcgan --kernels g139,g207 --base ac8bdc9
    # g139: base 9.783 ms (median 10.077), head 7.983 ms (median 8.078) a call (0.82x);
    #   dcgan b8, 1 thread(s), warm, least of 20 calls x 5 rounds
    # g207: base 24.986 ms (median 25.255), head 22.180 ms (median 31.654) a call
    #   (0.89x); dcgan b8, 1 thread(s), warm, least of 20 calls x 5 rounds
    # (--cold: 9.899 -> 8.106 ms, 0.82x; 24.666 -> 21.590 ms, 0.88x)

Kernels are matched by name (`g139`: see `gradfuse.profiler`'s table or `kernels_ab.py
--show`); a kernel's values differ from the program's (its inputs are not a step's),
so a time that depends on the data (a select, a denormal) is not the program's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kernels_ab import ROOT, SIZES, child_json, worktree  # benchmarks/kernels_ab.py

FLUSH = 64 << 20  # bytes written before each call with --cold: above any L3 of 2 cores

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *filled(long bytes, int is_float, unsigned *seed) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  memset(p, 0, bytes);
  if (is_float)
    for (long i = 0; i < bytes / 4; i++) {
      *seed = *seed * 1664525u + 1013904223u;
      ((float *)p)[i] = (float)(*seed >> 8) / 8388608.0f - 1.0f;
    }
  return p;
}

int main(int argc, char **argv) {
  int calls = atoi(argv[1]), cold = atoi(argv[2]);
  unsigned seed = 7;
  char *flush = cold ? calloc(FLUSH, 1) : NULL;
  ALLOCS
  double best = 1e30;
  for (int r = 0; r < calls; r++) {
    if (cold)
      for (long i = 0; i < FLUSH; i += 64) flush[i]++;
    double t = now();
    CALL;
    t = now() - t;
    if (t < best) best = t;
  }
  printf("%.9f\n", best);
  return 0;
}
"""


def child(model: str, names: list[str]) -> None:
    """(In the revision's process.) Prints JSON: per kernel, its harness program's C, and
    the gcc flags of this revision."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from convnets import FixedBatch, example
    from xdsl.dialects.builtin import Float32Type, MemRefType

    import gradfuse
    from gradfuse.backend.c import cache
    from gradfuse.backend.c.host import PRELUDE
    from gradfuse.backend.c.loop_render import LoopRenderer
    from gradfuse.passes.kernel.plan_buffers import element_bytes
    from gradfuse.passes.loops.loop_ir import kernel_functions

    module = example(model, **SIZES[model])
    gradfuse.reset()
    module.record(steps=1, log_every=1, data=FixedBatch(module.Data()))
    compiled = gradfuse.compile("c")
    functions = {fn.sym_name.data: fn for fn in kernel_functions(compiled.program.module)}
    out = {}
    for name in names:
        if name not in functions:
            raise SystemExit(f"{model} has no kernel {name}: it has {' '.join(sorted(functions))}")
        fn = functions[name]
        allocs, args = [], []
        for k, ty in enumerate(fn.function_type.inputs.data):
            if not isinstance(ty, MemRefType):
                raise SystemExit(f"{name}'s argument {k} is not a buffer ({ty}): not timed")
            size = element_bytes(ty) * max(1, int(ty.element_count()))
            is_float = int(isinstance(ty.element_type, Float32Type))
            allocs.append(f"void *a{k} = filled({size}L, {is_float}, &seed);")
            args.append(f"a{k}")
        text = HARNESS.replace("FLUSH", str(FLUSH)).replace("ALLOCS", "\n  ".join(allocs))
        text = text.replace("CALL", f"{name}({', '.join(args)})")
        out[name] = PRELUDE + LoopRenderer().kernel(fn) + text
    flags = [f for f in cache.flags() if f not in ("-shared", "-fPIC")]
    print(json.dumps({"programs": out, "flags": flags}))


def build(tree: Path, model: str, names: list[str], into: Path) -> dict[str, Path]:
    """The harness executables of `names` with gradfuse from `tree`, built in `into`."""
    args = [model, "--kernels", ",".join(names)]
    got = child_json(tree, __file__, args, f"rendering {model}'s kernels")
    exes = {}
    for name, text in got["programs"].items():
        src, exe = into / f"{name}.c", into / name
        src.write_text(text)
        cmd = ["gcc", *got["flags"], "-o", str(exe), str(src), "-lm"]
        gcc = subprocess.run(cmd, capture_output=True, text=True)
        if gcc.returncode != 0:
            raise SystemExit(f"gcc failed on {src}:\n{gcc.stderr}")
        exes[name] = exe
    return exes


def time_call(exe: Path, calls: int, cold: bool, threads: int) -> float:
    """The least seconds of a call of the kernel, over `calls` calls in one process."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(
        [str(exe), str(calls), str(int(cold))], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{exe} failed ({done.returncode}): {done.stderr}")
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(SIZES), default="dcgan")
    parser.add_argument("--kernels", required=True, help="kernel names, comma-separated")
    parser.add_argument("--base", help="also time the kernels under this revision")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="calls a round (the least kept)")
    parser.add_argument("--cold", action="store_true", help="write 64 MB before each call")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in args.kernels.split(",") if n]
    if args.child:
        child(args.child, names)
        return
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"head": (ROOT, Path(tmp) / "head")}
        with worktree(args.base) as base:
            if base is not None:
                sides = {"base": (base, Path(tmp) / "base"), **sides}
            exes = {}
            for side, (tree, into) in sides.items():
                into.mkdir()
                exes[side] = build(tree, args.model, names, into)
        times = {(side, n): [] for side in sides for n in names}
        for _ in range(args.rounds):
            for n in names:
                for side in sides:
                    times[side, n].append(
                        time_call(exes[side][n], args.calls, args.cold, args.threads)
                    )
    how = f"{args.model} b8, {args.threads} thread(s), {'cold' if args.cold else 'warm'}"
    for n in names:
        best = {side: min(times[side, n]) * 1e3 for side in sides}
        median = {side: statistics.median(times[side, n]) * 1e3 for side in sides}
        shown = ", ".join(
            f"{side} {best[side]:.3f} ms (median {median[side]:.3f})" for side in sides
        )
        ratio = f" ({best['head'] / best['base']:.2f}x)" if "base" in best else ""
        print(
            f"{n}: {shown} a call{ratio}; {how}, least of {args.calls} calls x {args.rounds} rounds"
        )


if __name__ == "__main__":
    main()
