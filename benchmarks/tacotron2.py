"""Tacotron 2 training (issue 16): examples/tacotron2.py's step, measured in one run.

    .venv/bin/python benchmarks/tacotron2.py [--rounds 3] [--threads N] [--quick]

1. Kernels per training step at the reference profile's configuration (batch 64, 14
   characters, 98 frames), by section as the profile gives them, beside PyTorch's
   counts in ../shared/reference/tacotron2_kernel_profile.txt (12,116 in all). A
   launch belongs to the section of the layer that does most of its work; launches in
   the frame loops are the decoder's per-frame kernels.
2. Trace + compile seconds at 8 and at 98 frames: to the fused program (the numpy
   backend: no code generation), and on c (gcc included, an empty cache). The frames
   are one `tg.for`, so the program is the same size.
3. Peak memory: the arena of temporaries (every intermediate of the step) at batch 64
   and at batch 4.
4. Seconds per step on the c backend against PyTorch CPU eager (NVIDIA's model, ported
   in tests/unit/torch_tacotron2.py) at batch 4, 14 characters, 98 frames: the best of
   `--rounds` steps each, the two taking turns.
5. The c profile of one step: the decoder's launches per frame, named by layer and
   direction, with their mean time per frame.

`--quick` uses 16 frames instead of 98 for 1, 4 and 5 (a smoke run).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from empty_cache import empty_cache  # benchmarks/empty_cache.py
from threads import add_threads_option, use_threads  # benchmarks/threads.py
from timing import best_of  # benchmarks/timing.py

import gradfuse
from gradfuse.passes import run_pipeline
from gradfuse.profiler import Launch, launches, profile, schedule

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from tacotron2 import record, synthetic_batches  # noqa: E402
from tacotron2_model import HParams  # noqa: E402

TORCH = {  # ../shared/reference/tacotron2_kernel_profile.txt, one step at batch 64, 98 frames
    "decoder frames, forward": 3332, "decoder frames, backward": 7607,
    "clipping": 126, "optimizer": 540, "total": 12116,
}  # fmt: skip
PER_FRAME = {"decoder frames, forward": 34, "decoder frames, backward": 78}  # intermediate frames
CLIP_LINE = "clip_grad_norm_("


def record_step(batch: int, text: int, frames: int, steps: int = 1) -> None:
    """Records `steps` training steps of the example (the full model, dropout on)."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    hp = HParams()
    record(hp, synthetic_batches(hp, batch, text, frames, count=1), steps, [])


def _clip_source() -> str:
    """`tacotron2.py:N`, the example's line that calls clip_grad_norm_."""
    lines = (ROOT / "examples" / "tacotron2.py").read_text().splitlines()
    return next(f"tacotron2.py:{i}" for i, s in enumerate(lines, 1) if CLIP_LINE in s)


def section(launch: Launch, frames: int, clip: str) -> str:
    """The profile's section of a launch: see the module docstring."""
    forward = launch.shares.get("forward", 0.0) >= 0.5
    if any(loop.trips == frames for loop in launch.loops) and "decoder" in ",".join(launch.layers):
        return "decoder frames, " + ("forward" if forward else "backward")
    if launch.shares.get("optimizer", 0.0) >= 0.5:
        return "optimizer"
    if clip in launch.sources:
        return "clipping"
    layer = max(launch.layer_shares.items(), key=lambda kv: kv[1])[0]
    part = layer.split(".")[0]
    name = {"embedding": "encoder", "encoder": "encoder", "decoder": "decoder, outside the frames",
            "postnet": "postnet"}.get(part, "loss")  # fmt: skip
    return f"{name}, {'forward' if forward else 'backward'}"


def kernels_by_section(batch: int, text: int, frames: int) -> tuple[dict[str, int], int, int]:
    """Launches per step by section, their total (checked against the program's own
    count) and the arena bytes."""
    record_step(batch, text, frames)
    compiled = gradfuse.compile("numpy")
    module = compiled.source.clone()
    run_pipeline(module, "kernels")
    clip = _clip_source()
    counts: dict[str, int] = {}
    for launch in launches(module):
        if launch.is_kernel:
            key = section(launch, frames, clip)
            counts[key] = counts.get(key, 0) + launch.executions
    total = sum(counts.values())
    assert total == compiled.kernels_per_iteration, (total, compiled.kernels_per_iteration)
    return counts, total, compiled.peak_bytes


def compile_seconds(frames: int, backend: str, batch: int = 64) -> float:
    """Trace + compile seconds of one step at `frames` frames on `backend` (an empty
    cache: gcc runs)."""
    with empty_cache():
        start = time.perf_counter()
        record_step(batch, 14, frames)
        gradfuse.compile(backend)
        seconds = time.perf_counter() - start
    return seconds


def gradfuse_step(batch: int, frames: int) -> Callable[[], None]:
    """One training step on c (compiled, and run once: the first run loads the library)."""
    record_step(batch, 14, frames)
    program = gradfuse.compile("c")
    program.run()
    return program.run


def torch_step(batch: int, frames: int) -> Callable[[], None] | None:
    """One step of NVIDIA's train.py in PyTorch CPU eager (after a warm-up step)."""
    try:
        import numpy as np
        import torch
    except ImportError:
        return None
    sys.path.insert(0, str(ROOT / "tests" / "unit"))
    import torch_tacotron2 as nvidia

    torch.manual_seed(0)
    model = nvidia.Tacotron2(nvidia.hparams())
    model.train()
    x, y = nvidia.to_torch(nvidia.synthetic_batch(np.random.default_rng(0), batch, 14, frames))
    criterion = nvidia.Tacotron2Loss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-6)

    def step() -> None:
        model.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    step()
    return step


def frame_profile(batch: int, frames: int) -> str:
    """The c profile of one step: each launch of the frame loops, mean µs per frame."""
    record_step(batch, 14, frames, steps=2)
    program = gradfuse.compile("c")
    with profile(schedule=schedule(wait=1, warmup=0, active=1)) as prof:
        program.run()
    spans = [s for s in prof.steps[-1].kernels() if s.launch is not None]
    rows: dict[str, list] = {}
    for s in spans:
        if any(loop.trips == frames for loop in s.launch.loops):
            row = rows.setdefault(s.name, [s, 0.0])
            row[1] += s.dur_us / frames
    step_us = prof.steps[-1].dur_us
    lines = [f"{'Kernel':8} {'Direction':22} {'us/frame':>9}  Op / Layers"]
    for name, (s, us) in rows.items():
        layers = sorted(s.layer_shares.items(), key=lambda kv: -kv[1])[:3]
        text = ", ".join(f"{k} {round(100 * v)}%" for k, v in layers)
        lines.append(f"{name:8} {s.direction:22} {us:9.1f}  {s.launch.op[:40]}: {text}")
    total = sum(us for _, us in rows.values())
    lines.append(
        f"{len(rows)} launches a frame, {total / 1000:.2f} ms a frame; the frames take"
        f" {100 * total * frames / step_us:.0f}% of the step's {step_us / 1e6:.2f} s"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed steps of each, taking turns")
    parser.add_argument("--quick", action="store_true", help="16 frames instead of 98")
    add_threads_option(parser)
    args = parser.parse_args()
    use_threads(args.threads)
    frames = 16 if args.quick else 98

    counts, total, peak64 = kernels_by_section(64, 14, frames)
    print(f"Tacotron 2 (full size), kernels per training step at batch 64, 14 characters,"
          f" {frames} frames:")  # fmt: skip
    print(f"  {'section':38} {'gradfuse':>9} {'PyTorch':>8}")
    for key in counts:  # in program order
        per = (
            f" ({counts[key] / frames:.0f} a frame; PyTorch {PER_FRAME[key]})"
            if key in PER_FRAME
            else ""
        )
        theirs = str(TORCH[key]) if key in TORCH and frames == 98 else ""
        print(f"  {key:38} {counts[key]:9d} {theirs:>8}{per}")
    print(f"  {'total':38} {total:9d} {TORCH['total'] if frames == 98 else '':>8}")

    for backend, label in (("numpy", "to the fused program"), ("c", "on c, gcc included")):
        short, long = compile_seconds(8, backend), compile_seconds(98, backend)
        print(f"trace+compile seconds {label}: 8 frames {short:.1f}, 98 frames {long:.1f}"
              f" (ratio {long / short:.2f})")  # fmt: skip

    record_step(4, 14, frames)
    peak4 = gradfuse.compile("numpy").peak_bytes
    print(f"arena of temporaries: {peak64 / 2**20:.0f} MiB at batch 64, {peak4 / 2**20:.0f} MiB"
          f" at batch 4 ({frames} frames)")  # fmt: skip

    ours = gradfuse_step(4, frames)
    theirs = torch_step(4, frames)
    runs = [ours] if theirs is None else [ours, theirs]
    best = best_of(args.rounds, runs)
    print(f"seconds per step at batch 4, {frames} frames (best of {args.rounds}, taking turns):"
          f" gradfuse c {best[0]:.2f}", end="")  # fmt: skip
    if theirs is not None:
        print(f", PyTorch CPU eager {best[1]:.2f}; speed-up {best[1] / best[0]:.2f}x")
    else:
        print(" (PyTorch not installed)")

    print(f"c profile of the decoder's frame at batch 4, {frames} frames:")
    print(frame_profile(4, frames))


if __name__ == "__main__":
    main()
