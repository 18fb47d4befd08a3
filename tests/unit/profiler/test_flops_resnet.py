"""ResNet-18's contraction FLOPs against torch.profiler (issue 14, Correctness 7).

One training step (forward, CrossEntropyLoss, backward, SGD with momentum) at batch 2,
32x32, 10 classes: examples/resnet18.py recorded and run through the `kernels`
pipeline, and the tutorial's ResNet-18 in plain PyTorch (torchvision's when importable)
under `torch.profiler.profile(with_flops=True)`.

What torch.profiler counts (torch 2.x, CPU): the rows with FLOPs are `aten::conv2d`
(the 20 forward convolutions), `aten::addmm` (fc forward) and `aten::mm` (fc's two
backward matmuls, grad input and grad weight); `aten::convolution_backward` has no
count. So the like-for-like comparison is

- conv forward: the `inner_flops` (2·ΠP·ΠR) of the contractions whose reduce is a conv
  layer's forward, against `aten::conv2d`;
- matmul: the contractions of `fc`, forward and backward, against `aten::addmm` +
  `aten::mm`;

each within 1 % (today both are exact). The backward convolutions, which torch.profiler
leaves out, are compared with `torch.utils.flop_counter.FlopCounterMode`'s
`aten.convolution_backward`: grad weight is the forward's multiply-adds, grad input too.
gradfuse's grad input of a stride-s conv runs over the stride-dilated domain (stride² the
points, the ones between the strides guarded to zero by an equality, `(ih - kh + 1) mod
2 == 0`); the profiler leaves those out (`launches.live_share`), as torch does (today
exact too).
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from math import prod
from typing import Any

import pytest
from example_programs import load_example  # tests/unit (conftest puts it on the path)

import gradfuse
from gradfuse.dialects import kernel as K
from gradfuse.frontend.recorder import program
from gradfuse.nn import Conv2d, Linear
from gradfuse.passes import run_pipeline
from gradfuse.profiler import launches
from gradfuse.provenance import provenance_of

torch = pytest.importorskip("torch")
nn = torch.nn

from torch_resnet import TorchResNet18  # noqa: E402 (tests/unit: needs torch)

BATCH, IMAGE, CLASSES = 2, 32, 10


def torch_resnet18() -> Any:
    try:
        import torchvision  # type: ignore[import-not-found]
    except ImportError:
        return TorchResNet18(CLASSES)
    return torchvision.models.resnet18(num_classes=CLASSES)


def torch_step(model: Any) -> None:
    """One training step, as examples/resnet18.py records it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = torch.randn(BATCH, 3, IMAGE, IMAGE), torch.randint(0, CLASSES, (BATCH,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(images), labels).backward()
    opt.step()


def torch_profiler_flops() -> dict[str, tuple[int, int]]:
    """torch.profiler's rows with FLOPs for one step: name -> (calls, FLOPs)."""
    from torch.profiler import profile

    torch.manual_seed(0)
    model = torch_resnet18()
    with profile(with_flops=True) as prof:
        torch_step(model)
    return {e.key: (e.count, e.flops) for e in prof.key_averages() if e.flops}


def torch_conv_backward_flops() -> int:
    """FlopCounterMode's `aten.convolution_backward` FLOPs for one step (grad input and
    grad weight of every conv, none for the images)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = torch_resnet18()
    counter = FlopCounterMode(display=False)
    with counter:
        torch_step(model)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    return counts["aten.convolution_backward"]


@cache  # both tests read it: one recording and one pipeline run
def gradfuse_contractions() -> tuple[dict[tuple[str, str], list[int]], dict[str, Any]]:
    """One step of examples/resnet18.py after the `kernels` pipeline: (layer, direction)
    of each contraction's reduce -> the `inner_flops` of those contractions, and the
    model's Conv2d and Linear layers by module path."""
    ex = load_example("resnet18", BATCH=BATCH, IMAGE=IMAGE, NUM_CLASSES=CLASSES)
    gradfuse.reset()
    model, _ = ex.record(steps=1, log_every=1)
    module = program().module.clone()
    run_pipeline(module, "kernels")
    inner = {w.symbol: w.inner_flops for r in launches(module) for w in r.kernels}
    found: dict[tuple[str, str], list[int]] = {}
    for op in module.walk():
        if not (isinstance(op, K.KernelOp) and op.kind.data == "contraction"):
            continue
        (reduce,) = [o for o in op.body.block.ops if isinstance(o, K.ReduceOp)]
        p = provenance_of(reduce.location)
        assert p.module_path is not None, op.sym_name.data
        found.setdefault((p.module_path, p.direction), []).append(inner[op.sym_name.data])
    layers = {n: m for n, m in model.named_modules() if isinstance(m, Conv2d | Linear)}
    return found, layers


def test_resnet18_conv_and_matmul_flops_match_torch_profiler() -> None:
    counted = torch_profiler_flops()
    assert set(counted) == {"aten::conv2d", "aten::addmm", "aten::mm"}, counted
    found, layers = gradfuse_contractions()
    assert {layer for layer, _ in found} <= set(layers), "every contraction is a conv or fc"
    kernels: Counter[str] = Counter()
    for (_, d), v in found.items():
        kernels[d] += len(v)
    # forward: 20 convs and fc; backward: grad weight of the 20 convs and fc, grad input
    # of fc and of 19 convs (not the stem's: the images need none)
    assert kernels == {"forward": 21, "backward": 21 + 1 + 19}

    def total(keep: Any) -> int:
        return sum(sum(v) for (layer, d), v in found.items() if keep(layer, d))

    conv_fwd = total(lambda layer, d: layer != "fc" and d == "forward")
    calls, want = counted["aten::conv2d"]
    assert calls == sum(len(v) for (la, d), v in found.items() if la != "fc" and d == "forward")
    assert abs(conv_fwd - want) <= 0.01 * want, (conv_fwd, want)

    matmul = total(lambda layer, d: layer == "fc")
    want = counted["aten::addmm"][1] + counted["aten::mm"][1]
    assert abs(matmul - want) <= 0.01 * want, (matmul, want)
    assert found[("fc", "forward")] == [counted["aten::addmm"][1]]  # 2·2·512·10, no bias add
    assert counted["aten::mm"] == (2, sum(found[("fc", "backward")]))


def test_resnet18_conv_backward_flops_are_torchs_strided_grad_inputs_too() -> None:
    found, layers = gradfuse_contractions()
    backward = sum(sum(v) for (layer, d), v in found.items() if d == "backward" and layer != "fc")
    strided = [n for n, m in layers.items() if isinstance(m, Conv2d) and prod(m.stride) > 1]
    assert len(strided) == 7  # the stem, layer2..4's first conv1 and downsample: stride 2
    want = torch_conv_backward_flops()
    assert abs(backward - want) <= 0.01 * want, (backward, want)
    forward = {layer: sum(v) for (layer, d), v in found.items() if d == "forward"}
    for name in strided[1:]:  # grad input and grad weight, each the forward's (the stem: no input)
        assert sum(found[(name, "backward")]) == 2 * forward[name], name
