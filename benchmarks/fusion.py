"""Fusion and compile-time numbers (issue 4), printed, measured in one run.

    .venv/bin/python benchmarks/fusion.py

1. Kernels per training step of the seed MLP (Linear(255, 255), Sigmoid,
   Linear(255, 255), SGD, loss = output sum) after the default pipeline, set
   against the seed's 5 fused kernels and PyTorch eager's count for the same
   step (counted from the reference profiles' rule: one kernel per op).
2. Zero kernels for views and zero_grad: kernels per step of small programs with
   a reshape, permute, broadcast or slice (or a chain of all four) feeding one
   elementwise op, set against the same op on an input of the view's shape; and
   of an MLP training step (Python API) with and without `opt.zero_grad()`.
   The same count means the views (or zero_grad) cost no kernel.
3. The whole pipeline (parse, tg-autodiff ... tg-fuse, convert-kernel-to-gpu)
   on programs of at least 1k, 3k and 10k tg ops, in wall and CPU seconds (the
   best of 3 runs, and the worst wall time), and how time grows with size.
"""

from __future__ import annotations

import gc
import math
import time

import numpy as np

from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline
from gradfuse.stats import kernel_stats

SEED_KERNELS = 5  # ../shared/reference/autodiff_fusion_example.txt
# PyTorch eager, one step of the same MLP: forward addmm + sigmoid + addmm (3),
# backward: ones_like seed, mm x2 for the second layer, sum (bias grad), sigmoid
# backward, mm x2 for the first layer, sum (6-8), SGD foreach add for 4 params
# (1-4) and zero_grad. The DCGAN profile shows the same pattern per layer.
TORCH_EAGER_ESTIMATE = "about 15"
REPEATS = 3
"""Runs of each pipeline timing: the best wall and CPU seconds are printed, and the worst
wall seconds (the machine is shared: the best shows the compiler, the worst the noise)."""


def seed_mlp(width: int = 255, batch: int = 2, steps: int = 1000) -> str:
    t = f"tensor<{batch}x{width}xf32>"
    w = f"tensor<{width}x{width}xf32>"
    b = f"tensor<{width}xf32>"
    lines = [
        "func @main() {",
        f"  tg.for %i = 0 to {steps} step 1 {{",
        f'    %x = tg.feeder "x" : {t}',
    ]
    for n, k in ((1, "0"), (2, "2")):
        lines += [
            f'    %w{n} = tg.param "{k}.weight" : {w}',
            f'    %b{n} = tg.param "{k}.bias" : {b}',
            f"    %w{n}t = tg.permute %w{n} perm=[1, 0] : {w}",
            f"    %b{n}r = tg.reshape %b{n} : tensor<1x{width}xf32>",
            f"    %b{n}b = tg.broadcast %b{n}r : {t}",
        ]
    lines += [
        f"    %z1 = tg.dot %x, %w1t : {t}",
        f"    %a1 = tg.add %z1, %b1b : {t}",
        f"    %h = tg.sigmoid %a1 : {t}",
        f"    %z2 = tg.dot %h, %w2t : {t}",
        f"    %y = tg.add %z2, %b2b : {t}",
        f"    %g1, %g2, %g3, %g4 = tg.grad %y wrt %w1, %b1, %w2, %b2 : {w}, {b}, {w}, {b}",
    ]
    for g, p, k, ty in (("g1", "w1", "0.weight", w), ("g2", "b1", "0.bias", b),
                        ("g3", "w2", "2.weight", w), ("g4", "b2", "2.bias", b)):  # fmt: skip
        lines += [
            f"    %lr{g} = tg.constant -0.01 : {ty}",
            f"    %d{g} = tg.mul %{g}, %lr{g} : {ty}",
            f"    %n{g} = tg.add %{p}, %d{g} : {ty}",
            f'    tg.assign "{k}", %n{g}',
        ]
    lines += ["    tg.yield", "  }", "  return", "}"]
    return "\n".join(lines) + "\n"


def deep_mlp(layers: int, width: int = 16, batch: int = 4) -> str:
    """A tanh MLP with SGD: about 15 tg ops per layer before autodiff."""
    t, w, b = f"tensor<{batch}x{width}xf32>", f"tensor<{width}x{width}xf32>", f"tensor<{width}xf32>"
    lines = ["func @main() {", "  tg.for %i = 0 to 10 step 1 {", f'    %x = tg.feeder "x" : {t}']
    h = "%x"
    for n in range(layers):
        lines += [
            f'    %w{n} = tg.param "w{n}" init=0.01 : {w}',
            f'    %b{n} = tg.param "b{n}" init=0.0 : {b}',
            f"    %z{n} = tg.dot {h}, %w{n} : {t}",
            f"    %br{n} = tg.reshape %b{n} : tensor<1x{width}xf32>",
            f"    %bb{n} = tg.broadcast %br{n} : {t}",
            f"    %a{n} = tg.add %z{n}, %bb{n} : {t}",
            f"    %h{n} = tg.tanh %a{n} : {t}",
        ]
        h = f"%h{n}"
    wrt = ", ".join(f"%w{n}, %b{n}" for n in range(layers))
    grads = ", ".join(f"%gw{n}, %gb{n}" for n in range(layers))
    lines.append(f"    {grads} = tg.grad {h} wrt {wrt} : " + ", ".join([w, b] * layers))
    for n in range(layers):
        for p, ty in ((f"w{n}", w), (f"b{n}", b)):
            lines += [
                f"    %l{p} = tg.constant -0.01 : {ty}",
                f"    %d{p} = tg.mul %g{p}, %l{p} : {ty}",
                f"    %n{p} = tg.add %{p}, %d{p} : {ty}",
                f'    tg.assign "{p}", %n{p}',
            ]
    lines += ["    tg.yield", "  }", "  return", "}"]
    return "\n".join(lines) + "\n"


def layers_for(ops: int) -> int:
    """The fewest `deep_mlp` layers that make at least `ops` tg ops (15 a layer, 4 more)."""
    return math.ceil((ops - 4) / 15)


def count_tg_ops(module) -> int:
    return sum(1 for op in module.walk() if op.name.startswith("tg."))


def loop_program(body: list[str], out: str, steps: int = 10) -> str:
    """`body` (tg ops) in a loop of `steps` iterations whose value `out` is received."""
    lines = ["func @main() {", f"  tg.for %i = 0 to {steps} step 1 {{"]
    lines += [f"    {line}" for line in body]
    lines += [f'    tg.receiver "out", {out}', "    tg.yield", "  }", "  return", "}"]
    return "\n".join(lines) + "\n"


VIEW_CASES: list[tuple[str, list[str], list[str]]] = [
    (
        "reshape",
        ['%x = tg.feeder "x" : tensor<4x6xf32>', "%v = tg.reshape %x : tensor<6x4xf32>",
         "%y = tg.exp2 %v : tensor<6x4xf32>"],
        ['%x = tg.feeder "x" : tensor<6x4xf32>', "%y = tg.exp2 %x : tensor<6x4xf32>"],
    ),
    (
        "permute",
        ['%x = tg.feeder "x" : tensor<4x6xf32>', "%v = tg.permute %x perm=[1, 0] : tensor<6x4xf32>",
         "%y = tg.exp2 %v : tensor<6x4xf32>"],
        ['%x = tg.feeder "x" : tensor<6x4xf32>', "%y = tg.exp2 %x : tensor<6x4xf32>"],
    ),
    (
        "broadcast",
        ['%x = tg.feeder "x" : tensor<4x6xf32>', '%b = tg.param "b" init=0.5 : tensor<6xf32>',
         "%r = tg.reshape %b : tensor<1x6xf32>", "%v = tg.broadcast %r : tensor<4x6xf32>",
         "%y = tg.add %x, %v : tensor<4x6xf32>"],
        ['%x = tg.feeder "x" : tensor<4x6xf32>', '%b = tg.param "b" init=0.5 : tensor<4x6xf32>',
         "%y = tg.add %x, %b : tensor<4x6xf32>"],
    ),
    (
        "slice",
        ['%x = tg.feeder "x" : tensor<4x6xf32>',
         "%v = tg.slice %x starts=[0, 2] limits=[4, 6] strides=[1, 1] : tensor<4x4xf32>",
         "%y = tg.exp2 %v : tensor<4x4xf32>"],
        ['%x = tg.feeder "x" : tensor<4x4xf32>', "%y = tg.exp2 %x : tensor<4x4xf32>"],
    ),
    (
        "chain of all four",
        ['%x = tg.feeder "x" : tensor<4x6xf32>', "%r = tg.reshape %x : tensor<6x4xf32>",
         "%p = tg.permute %r perm=[1, 0] : tensor<4x6xf32>",
         "%s = tg.slice %p starts=[0, 0] limits=[4, 6] strides=[2, 1] : tensor<2x6xf32>",
         "%q = tg.reshape %s : tensor<1x2x6xf32>", "%v = tg.broadcast %q : tensor<3x2x6xf32>",
         "%y = tg.mul %v, %v : tensor<3x2x6xf32>"],
        ['%x = tg.feeder "x" : tensor<3x2x6xf32>', "%y = tg.mul %x, %x : tensor<3x2x6xf32>"],
    ),
]  # fmt: skip
"""(name, body with the view ops, body of the same elementwise op without them)."""


def kernels_per_step(src: str) -> int:
    """Kernel launches per loop iteration of .tg `src` after the default pipeline."""
    module = parse_tg(src, "case.tg")
    run_pipeline(module, "default")
    return kernel_stats(module).kernels_per_iteration


def mlp_step_kernels(zero_grad: bool) -> int:
    """Kernels per step of Linear(8, 16), Sigmoid, Linear(16, 4) trained with SGD through
    the Python API, the step calling `opt.zero_grad()` first or not."""
    import gradfuse
    from gradfuse import Feeder, ir_for
    from gradfuse.nn import SGD, Linear, Sequential, Sigmoid

    gradfuse.reset()
    model = Sequential(Linear(8, 16), Sigmoid(), Linear(16, 4))
    opt = SGD(model.parameters(), lr=0.1)

    def step() -> None:
        if zero_grad:
            opt.zero_grad()
        x = Feeder(lambda: np.ones((2, 8), np.float32), shape=[2, 8])
        model(x).sum().backward()
        opt.step()

    ir_for(range(10), step)
    return gradfuse.compile("reference").kernels_per_iteration


def main() -> None:
    module = parse_tg(seed_mlp(), "seed_mlp.tg")
    run_pipeline(module, "default")
    stats = kernel_stats(module)
    print("== kernels per training step, seed MLP (2x255, Linear-Sigmoid-Linear, SGD)")
    print(f"gradfuse            {stats.kernels_per_iteration}")
    print(f"seed listing        {SEED_KERNELS}")
    print(f"PyTorch eager       {TORCH_EAGER_ESTIMATE} (one kernel per op)")
    print(f"peak arena bytes    {stats.peak_bytes}")
    print()
    print("== zero kernels for views and zero_grad: kernels per step with the view ops")
    print("   (or opt.zero_grad()) and without them, measured; cost = the difference")
    print(f"{'program':<44} {'with':>5} {'without':>8} {'cost':>5}")
    for name, with_views, without in VIEW_CASES:
        a = kernels_per_step(loop_program(with_views, "%y"))
        b = kernels_per_step(loop_program(without, "%y"))
        print(f"{name + ' -> one elementwise op':<44} {a:>5} {b:>8} {a - b:>5}")
    a, b = mlp_step_kernels(zero_grad=True), mlp_step_kernels(zero_grad=False)
    print(f"{'MLP training step (SGD), opt.zero_grad()':<44} {a:>5} {b:>8} {a - b:>5}")
    print()
    print(f"== pipeline time (parse + default pipeline) by program size, {REPEATS} runs each")
    print(f"{'tg ops':>8} {'wall s':>8} {'worst':>8} {'CPU s':>8} {'us/op':>8}")
    base = None
    for target in (1_000, 3_000, 10_000):
        ops, walls, cpus = time_pipeline(deep_mlp(layers_for(target)))
        per = min(cpus) / ops * 1e6
        base = base or per
        print(
            f"{ops:>8} {min(walls):>8.2f} {max(walls):>8.2f} {min(cpus):>8.2f} {per:>8.0f}"
            f"   ({per / base:.2f}x the smallest's CPU time per op)"
        )


def time_pipeline(src: str) -> tuple[int, list[float], list[float]]:
    """Parses `src` and runs the default pipeline `REPEATS` times: its tg op count and the
    wall and CPU seconds of each run. Each run starts from a clean heap; the collector's
    work on its garbage and IR (at the end of parsing and of the pipeline) is timed."""
    ops, walls, cpus = 0, [], []
    for _ in range(REPEATS):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        module = parse_tg(src, "deep.tg")
        ops = count_tg_ops(module)
        run_pipeline(module, "default")
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        del module
    return ops, walls, cpus


if __name__ == "__main__":
    main()
