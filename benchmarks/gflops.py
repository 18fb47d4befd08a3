"""Achieved GFLOP/s of the C backend's contraction and convolution kernels, beside one
core's single-precision GEMM from NumPy's BLAS measured in the same run (issue 18).

    .venv/bin/python benchmarks/gflops.py [--threads 1] [--steps 5] [--rows 8]
        [--models transformer,dcgan,resnet18]

The yardstick: `A @ B` on float32 square matrices (512, 1024 and 2048) with BLAS on
`--threads` threads; the best of them is the peak printed. Then the transformer layer
of benchmarks/transformer.py, DCGAN (batch 8) and ResNet-18 (batch 8, 64x64) train on
the C backend under `gradfuse.profiler` (`with_flops=True`); every launch that holds a
contraction is timed, and its multiply-adds (`KernelWork.inner_flops`: 2·ΠP·ΠR, what
torch.profiler counts for a matmul or a convolution) are divided by its time. A
contraction is a convolution where one of its reads indexes a parallel and a reduction
dim together (a window: `oh * 2 + kh`, forward, input or weight gradient); a matmul
otherwise. A launch's time includes what is fused with the contraction (a batch norm's
sums, an activation), so the rate is a lower bound on the contraction's own.

The table: per model and class, the FLOPs, seconds and GFLOP/s of a step's
contractions, their share of the peak, and the `--rows` slowest launches by time; each
also with its *best*: every launch's least time a step over the `--steps` - 1 timed
steps, summed (a shared host's load only adds to a kernel's time: on the developer Zen
3 one run's average put ResNet-18 b8's convolutions at 36 GFLOP/s and the next runs'
at 52-59, the same code).
Then each model's floor: its step's contraction FLOPs at the peak, a bound on any
implementation's step on this machine, PyTorch's included (a step of DCGAN b8 cannot
run in less than its 15.4 GFLOP at ~100 GFLOP/s, 150 ms on a 2-core Zen 4).
`GRADFUSE_C_PIPELINE` gives the c backend's pipeline options (`cpu{jam-work=0}`).
"""

from __future__ import annotations

import argparse
import os
import sys

# BLAS reads its thread count when NumPy loads: set it before anything imports NumPy.
THREADS = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = THREADS

import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import partial  # noqa: E402

import numpy as np  # noqa: E402
from convnets import example  # noqa: E402 (benchmarks/convnets.py)
from xdsl.ir.affine import AffineDimExpr, AffineExpr, AffineSet  # noqa: E402

import gradfuse  # noqa: E402
from gradfuse.affine import guard_share, linear  # noqa: E402
from gradfuse.backend import pipeline_of  # noqa: E402
from gradfuse.dialects import kernel as K  # noqa: E402
from gradfuse.frontend.recorder import program  # noqa: E402
from gradfuse.passes import run_pipeline  # noqa: E402
from gradfuse.profiler import profile, schedule  # noqa: E402
from gradfuse.profiler.launches import live_share  # noqa: E402

SIZES = (512, 1024, 2048)


def sgemm_gflops(n: int, seconds: float = 0.5) -> float:
    """GFLOP/s of NumPy's float32 `a @ b` at n x n, the best of repeats over `seconds`."""
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    a @ b  # warm: BLAS's buffers, the pages of the result
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def windowed(expr: AffineExpr, domain: list[int], parallel: int) -> bool:
    """Whether an index adds a parallel and a reduction dim as a window does (`oh * 2 +
    kh`, or through the divisions of a flat window dim), not as a flat index of two dims
    (`h * 16 + e`, e < 16: attention's heads)."""
    used = expr.used_dims()
    if not (any(d < parallel for d in used) and any(d >= parallel for d in used)):
        return False
    terms, _ = linear(expr, domain)
    if not all(isinstance(atom, AffineDimExpr) for atom in terms):
        return True  # a division or a remainder of dims
    coef = {atom.position: c for atom, c in terms.items()}  # type: ignore[attr-defined]
    return any(
        abs(cp) != abs(cr) * domain[r] and abs(cr) != abs(cp) * domain[p]
        for p, cp in coef.items()
        for r, cr in coef.items()
        if p < parallel <= r
    )


def useful(guard: AffineSet, domain: list[int]) -> float:
    """The share of the domain's points where `guard` holds (a padding's or a stride's
    taps that read a zero are no work), over the dims the guard mentions."""
    return guard_share(guard, domain, 1 << 25)  # (past 2^25 points: all, an upper bound)


def contractions(module: object) -> dict[str, tuple[bool, float]]:
    """Each contraction kernel's symbol -> (whether it is a convolution, the share of its
    counted multiply-adds that read no padding: `KernelWork.inner_flops` leaves out the
    taps of a stride's dead phases already, `launches.live_share`)."""
    found: dict[str, tuple[bool, float]] = {}
    for op in module.walk():  # type: ignore[attr-defined]
        if not (isinstance(op, K.KernelOp) and op.kind.data == "contraction"):
            continue
        parallel, domain = op.parallel.value.data, list(op.domain.get_values())
        loads = [o for o in op.body.walk() if isinstance(o, K.LoadOp)]
        conv = any(windowed(e, domain, parallel) for o in loads for e in o.map.data.results)
        guards = [o.guard.data for o in loads if o.guard is not None]
        share = min((useful(g, domain) for g in guards), default=1.0)
        found[op.sym_name.data] = (conv, share / live_share(op))  # (inner_flops has the live)
    return found


@dataclass
class Row:
    model: str
    launch: str
    kind: str  # "convolution" or "matmul"
    params: str
    flops: int
    seconds: float
    step: int  # which profiled step


def measure(model: str, record: Callable[[], None], steps: int) -> list[Row]:
    """Each contraction launch of the model's last `steps - 1` steps on the C backend."""
    gradfuse.reset()
    record()
    module = program().module.clone()
    run_pipeline(module, "kernels")
    found = contractions(module)
    with profile(schedule=schedule(wait=1, warmup=0, active=steps - 1), with_flops=True) as prof:
        gradfuse.execute(backend="c")
    rows: list[Row] = []
    for index, step in enumerate(prof.steps):
        for span in step.kernels():
            works = [w for w in (span.launch.kernels if span.launch else ()) if w.symbol in found]
            if not works:
                continue
            kind = "convolution" if any(found[w.symbol][0] for w in works) else "matmul"
            flops = round(sum(w.inner_flops * found[w.symbol][1] for w in works))
            params = " ".join(w.params for w in works)
            rows.append(Row(model, span.name, kind, params, flops, span.dur_us / 1e6, index))
    return rows


def transformer(steps: int) -> None:
    from gradfuse import Feeder, ir_for
    from gradfuse.nn import SGD, TransformerEncoderLayer

    gradfuse.manual_seed(0)
    layer = TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    opt = SGD(layer.parameters())
    x = np.random.default_rng(0).normal(size=(2, 16, 64)).astype(np.float32)

    def step() -> None:
        opt.zero_grad()
        layer(Feeder(lambda: x, shape=[2, 16, 64], name="x")).sum().backward()
        opt.step()

    ir_for(range(steps), step)


def convnet(name: str, steps: int, **sizes: int) -> None:
    example(name, **sizes).record(
        steps=steps, log_every=1
    )  # a receiver each step: a profiled step each


MODELS: dict[str, tuple[str, Callable[[int], None]]] = {
    "transformer": ("transformer", transformer),
    "dcgan": ("dcgan b8", lambda steps: convnet("dcgan", steps, BATCH=8)),
    "resnet18": (
        "resnet18 b8 64x64",
        lambda steps: convnet("resnet18", steps, BATCH=8, IMAGE=64),
    ),
}
"""The models measured, by their `--models` name: the row label and the recording."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS and OpenMP threads")
    parser.add_argument("--steps", type=int, default=5, help="steps run (the first untimed)")
    parser.add_argument("--rows", type=int, default=8, help="slowest launches listed")
    parser.add_argument("--models", default="transformer,dcgan,resnet18", help="which, by name")
    args = parser.parse_args()
    names = args.models.split(",")
    for name in names:
        if name not in MODELS:
            parser.error(f"--models: {name!r} is not one of {', '.join(MODELS)}")
    rates = {n: sgemm_gflops(n) for n in SIZES}
    peak = max(rates.values())
    sizes = ", ".join(f"{n}: {r:.1f}" for n, r in rates.items())
    print(f"NumPy SGEMM on {args.threads} thread(s), GFLOP/s by size ({sizes}); peak {peak:.1f}")
    pipeline = pipeline_of("c")
    rows: list[Row] = []
    for name in names:
        label, record = MODELS[name]
        rows += measure(label, partial(record, args.steps), args.steps)
    timed = max(args.steps - 1, 1)
    launches: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        launches.setdefault((r.model, r.launch), []).append(r)
    best = {key: least(rs) for key, rs in launches.items()}
    print(f"\nC backend ({pipeline} pipeline), contractions per step (best: each launch's")
    print(f"least time a step over the {timed} timed steps; the host's load only adds):")
    print(
        f"{'model':<20}{'class':<13}{'launches':>9}{'GFLOP':>9}{'ms':>10}{'GFLOP/s':>9}"
        f"{'of peak':>9}{'best ms':>9}{'GFLOP/s':>9}{'of peak':>9}"
    )
    floors: list[str] = []
    for model in dict.fromkeys(r.model for r in rows):
        for kind in ("matmul", "convolution"):
            sel = [r for r in rows if r.model == model and r.kind == kind]
            if not sel:
                continue
            flops, seconds = sum(r.flops for r in sel) / timed, sum(r.seconds for r in sel) / timed
            least_s = sum(
                best[r.model, r.launch] for r in {(r.model, r.launch): r for r in sel}.values()
            )
            rate, top = flops / seconds / 1e9, flops / least_s / 1e9
            print(f"{model:<20}{kind:<13}{len(sel) // timed:>9}{flops / 1e9:>9.3f}"
                  f"{seconds * 1e3:>10.2f}{rate:>9.2f}{rate / peak:>9.1%}"
                  f"{least_s * 1e3:>9.2f}{top:>9.2f}{top / peak:>9.1%}")  # fmt: skip
        flops = sum(r.flops for r in rows if r.model == model) / timed
        floors.append(f"{model}: {flops / peak / 1e6:.2f} ms")
    print(
        "\nA step's contractions at the peak (the least time a step can take on this"
        " machine, whoever computes it): " + ", ".join(floors)
    )
    print(f"\nThe {args.rows} slowest contraction launches (a step's average, and its least):")
    print(f"{'model':<20}{'launch':<8}{'class':<13}{'ms':>8}{'GFLOP/s':>9}{'best ms':>9}"
          f"{'GFLOP/s':>9}  domain")  # fmt: skip
    slowest = sorted(launches.items(), key=lambda kv: -sum(r.seconds for r in kv[1]))
    for key, rs in slowest[: args.rows]:
        r, flops = rs[0], sum(r.flops for r in rs) / timed
        seconds = sum(r.seconds for r in rs) / timed
        print(f"{r.model:<20}{r.launch:<8}{r.kind:<13}{seconds * 1e3:>8.2f}"
              f"{flops / seconds / 1e9:>9.2f}{best[key] * 1e3:>9.2f}"
              f"{flops / best[key] / 1e9:>9.2f}  {r.params}")  # fmt: skip


def least(rows: list[Row]) -> float:
    """A launch's least time in one step, over the steps profiled (its time a step: the
    sum of its runs in that step, where a loop inside the step runs it more than once)."""
    steps: dict[int, float] = {}
    for r in rows:
        steps[r.step] = steps.get(r.step, 0.0) + r.seconds
    return min(steps.values())


if __name__ == "__main__":
    main()
