"""Data-parallel scaling on paper (issue 19): per model, the bytes all-reduced per step,
a ring all-reduce's time at NVLink and InfiniBand bandwidths, and the scaling
efficiency on 8 GPUs (one node) and on 64 GPUs (8 nodes). docs/ddp-scaling.md has the
table this prints, the sources of every number and what the model leaves out.

    .venv/bin/python benchmarks/ddp_scale.py      # no GPU, no MPI: arithmetic only

Bytes are counted from gradfuse's own models (4 bytes a float32 gradient, each param's
gradient reduced once a step). Times follow the ring all-reduce's cost, as the NCCL
tests define bus bandwidth: each of n ranks sends and receives 2 (n - 1) / n of the
buffer, in 2 (n - 1) steps that each cost a latency ALPHA.
"""

from __future__ import annotations

import sys
from math import prod
from pathlib import Path

import gradfuse
from gradfuse.nn import Linear, Sequential, Sigmoid, TransformerEncoderLayer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

NVLINK = 450e9
"""Bytes/s one H100/H200 SXM GPU sends (and receives) over NVLink 4: 18 links of 25 GB/s
each way, 900 GB/s both ways together, through NVSwitch to any GPU of its node."""
IB = 50e9
"""Bytes/s of one NDR InfiniBand port (400 Gb/s) each way: a DGX H100 has 8
ConnectX-7 ports, one beside each GPU."""
ALPHA_NVLINK, ALPHA_IB = 3e-6, 5e-6
"""Seconds of latency per ring step (an assumption: see docs/ddp-scaling.md)."""


def params(model: gradfuse.nn.Module) -> int:
    return sum(prod(p.shape) for p in model.parameters())


def models() -> dict[str, tuple[int, float | None, str]]:
    """Model -> (gradient bytes a step, its measured step time on one GPU or None, where
    that time comes from)."""
    import dcgan
    import resnet18
    import tacotron2_model

    gradfuse.manual_seed(0)
    mlp = Sequential(Linear(255, 255), Sigmoid(), Linear(255, 255))
    layer = TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    gan = params(dcgan.Generator()) + params(dcgan.Discriminator())
    taco = tacotron2_model.Tacotron2(tacotron2_model.HParams())
    return {
        "seed MLP": (4 * params(mlp), 70.8e-6, "gradfuse cuda, H200, batch 2"),
        "transformer layer": (4 * params(layer), 0.232e-3, "gradfuse cuda, H200, batch 2"),
        "DCGAN": (4 * gan, 9.72e-3, "PyTorch CUDA eager, H200, batch 128"),
        "ResNet-18": (4 * params(resnet18.resnet18()), 0.101, "reference profile, kernels"),
        "Tacotron 2": (4 * params(taco), None, "not measured on a GPU"),
    }


def ring(nbytes: float, n: int, bw: float, alpha: float) -> float:
    """Seconds for a ring all-reduce of `nbytes` over `n` ranks on links of `bw`."""
    return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * alpha


def two_level(nbytes: float, gpus: int = 8, nodes: int = 8) -> float:
    """64 GPUs as 8 nodes of 8: reduce-scatter inside each node over NVLink, a ring
    all-reduce of each GPU's 1/8 across the nodes on its own InfiniBand port, then an
    all-gather inside the node (NCCL's and Horovod's hierarchical all-reduce)."""
    inside = 2 * ((gpus - 1) / gpus * nbytes / NVLINK + (gpus - 1) * ALPHA_NVLINK)
    return inside + ring(nbytes / gpus, nodes, IB, ALPHA_IB)


def efficiency(step: float | None, talk: float) -> str:
    """Serial (the all-reduce after the backward, gradfuse today) and overlapped (the
    bound when it hides under the backward, as PyTorch DDP's buckets try)."""
    if step is None:
        return "-"
    return f"{100 * step / (step + talk):.0f} % / {100 * step / max(step, talk):.0f} %"


def main() -> None:
    rows = [
        "| model | params | bytes a step | 8 GPUs: ring on NVLink | 64 GPUs: 8 nodes, NVLink + IB"
        " | 1-GPU step (source) | efficiency 8 GPUs, serial / overlapped | 64 GPUs |"
        " step for 90 % serial, 64 GPUs |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for name, (nbytes, step, source) in models().items():
        t8, t64 = ring(nbytes, 8, NVLINK, ALPHA_NVLINK), two_level(nbytes)
        shown = "-" if step is None else f"{step * 1e3:.3g} ms ({source})"
        rows.append(
            f"| {name} | {nbytes // 4:,} | {nbytes / 2**20:.2f} MiB | {t8 * 1e6:,.0f} us"
            f" | {t64 * 1e6:,.0f} us | {shown} | {efficiency(step, t8)}"
            f" | {efficiency(step, t64)} | {9 * t64 * 1e3:.2f} ms |"
        )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
