"""Fusion and compile-time numbers (issue 4), printed, measured in one run.

    .venv/bin/python benchmarks/fusion.py

1. Kernels per training step of the seed MLP (Linear(255, 255), Sigmoid,
   Linear(255, 255), SGD, loss = output sum) after the default pipeline, set
   against the seed's 5 fused kernels and PyTorch eager's count for the same
   step (counted from the reference profiles' rule: one kernel per op).
2. The whole pipeline (parse, tg-autodiff ... tg-fuse, convert-kernel-to-gpu)
   on programs of about 1k, 3k and 10k tg ops, and how time grows with size.
"""

from __future__ import annotations

import time

from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline
from gradfuse.stats import kernel_stats

SEED_KERNELS = 5  # ../shared/reference/autodiff_fusion_example.txt
# PyTorch eager, one step of the same MLP: forward addmm + sigmoid + addmm (3),
# backward: ones_like seed, mm x2 for the second layer, sum (bias grad), sigmoid
# backward, mm x2 for the first layer, sum (6-8), SGD foreach add for 4 params
# (1-4) and zero_grad. The DCGAN profile shows the same pattern per layer.
TORCH_EAGER_ESTIMATE = "about 15"


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


def count_tg_ops(module) -> int:
    return sum(1 for op in module.walk() if op.name.startswith("tg."))


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
    print("== pipeline time (parse + default pipeline) by program size")
    print(f"{'tg ops':>8} {'seconds':>8} {'us/op':>8}")
    base = None
    for layers in (65, 200, 650):
        src = deep_mlp(layers)
        start = time.perf_counter()
        m = parse_tg(src, "deep.tg")
        ops = count_tg_ops(m)
        run_pipeline(m, "default")
        took = time.perf_counter() - start
        per = took / ops * 1e6
        base = base or per
        print(f"{ops:>8} {took:>8.2f} {per:>8.0f}   ({per / base:.2f}x the smallest's time per op)")


if __name__ == "__main__":
    main()
