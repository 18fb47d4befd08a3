"""Smaller pieces of PyTorch's API that its examples use: integer feeders (class labels
as int64), `gradfuse.save/load`, `clip_grad_value_`, `F.kl_div`/`KLDivLoss`,
`F.embedding`, `Softmax2d`, `rand(dtype=, device=)`, `is_cuda`, and `x[...] = value`
of a float64 tensor."""

from __future__ import annotations

from pathlib import Path

import gradfuse.nn.functional as F
import numpy as np
import pytest

import gradfuse
import gradfuse.nn as nn
from gradfuse import Feeder, Receiver, execute, ir_for
from gradfuse.diagnostics import GradfuseError


def received(tensors: list, backend: str = "reference") -> list[np.ndarray]:  # noqa: ANN001
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), tensors)
    execute(backend=backend)
    return got


def test_int64_labels_feed_as_float32_and_bad_ones_stop_the_run() -> None:
    gradfuse.reset()
    batches = iter([np.array([2, 0, 1], np.int64), np.array([1, 1, 0], np.int64)])
    logits = gradfuse.tensor([[0.1, 0.2, 0.7], [0.5, 0.3, 0.2], [0.3, 0.3, 0.4]])
    losses: list[float] = []

    def step() -> None:
        y = Feeder(lambda: next(batches), shape=[3], dtype=np.int64, name="labels")
        Receiver(lambda v: losses.append(float(v)), F.cross_entropy(logits, y))

    ir_for(range(2), step)
    execute(backend="reference")
    assert len(losses) == 2 and losses[0] != losses[1]
    gradfuse.reset()
    y = Feeder(lambda: np.array([0.5]), shape=[1], dtype=np.int64, name="labels")
    with pytest.raises(GradfuseError, match='feeder "labels".*expected integers'):
        received([y * 1.0])


def test_save_and_load_a_state_dict(tmp_path: Path) -> None:
    gradfuse.reset()
    model = nn.Linear(3, 2)
    gradfuse.save(model.state_dict(), tmp_path / "model.pth")
    other = nn.Linear(3, 2)
    other.load_state_dict(gradfuse.load(tmp_path / "model.pth", weights_only=True))
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[key], value)
    with pytest.raises(GradfuseError, match=r"\['x'\] is a traced tensor"):
        gradfuse.save({"x": model.weight * 2.0}, tmp_path / "bad.pth")


def test_clip_grad_value_kl_div_embedding_and_softmax2d_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    w0 = rng.normal(size=(5, 3)).astype(np.float32)
    logp = np.log(rng.dirichlet(np.ones(4), size=3)).astype(np.float32)
    target = rng.dirichlet(np.ones(4), size=3).astype(np.float32)
    target[0, 1] = 0.0  # a zero target contributes 0
    img = rng.normal(size=(2, 3, 2, 2)).astype(np.float32)
    gradfuse.reset()
    w = gradfuse.Parameter(w0.copy(), name="w")
    ids = gradfuse.tensor([[4, 0], [2, 2]])
    emb = F.embedding(ids, w)
    (emb * 10.0).sum().backward()
    nn.utils.clip_grad_value_([w], 15.0)
    lp, t = gradfuse.tensor(logp), gradfuse.tensor(target)
    outs = [emb, w.grad, F.kl_div(lp, t, reduction="batchmean"), nn.KLDivLoss()(lp, t),
            F.kl_div(lp, t.log(), reduction="none", log_target=True),
            nn.Softmax2d()(gradfuse.tensor(img))]  # fmt: skip
    got = received(outs)
    tw = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    temb = torch.nn.functional.embedding(torch.tensor([[4, 0], [2, 2]]), tw)
    (temb * 10.0).sum().backward()
    torch.nn.utils.clip_grad_value_([tw], 15.0)
    tl, tt = torch.tensor(logp, dtype=torch.float64), torch.tensor(target, dtype=torch.float64)
    want = [temb, tw.grad, torch.nn.functional.kl_div(tl, tt, reduction="batchmean"),
            torch.nn.KLDivLoss()(tl, tt),
            torch.nn.functional.kl_div(tl, torch.log(tt), reduction="none", log_target=True),
            torch.nn.Softmax2d()(torch.tensor(img, dtype=torch.float64))]  # fmt: skip
    np.testing.assert_array_equal(got[1][2], [15.0, 15.0, 15.0])  # 20 clipped to 15
    for k, (g, v) in enumerate(zip(got, want, strict=True)):
        # float32 against float64: a log, a product and sums of 12 terms, within 2e-7
        # relative here (2026-12-07, reference); log(0) * 0 is 0 on both sides
        np.testing.assert_allclose(g, v.detach().numpy(), rtol=2e-6, atol=1e-7, err_msg=str(k))


def test_rand_dtype_device_is_cuda_and_item_assignment() -> None:
    gradfuse.reset()
    x = gradfuse.rand(2, 3, dtype=gradfuse.float64, device="cpu")
    assert x.dtype == np.float64 and x.is_cuda == (x.device.type == "cuda")
    x[:, 0] = 1.0  # (item assignment in full: test_setitem.py)
    got: list[np.ndarray] = []
    Receiver(lambda v: got.append(v), x)
    execute(backend="reference")
    assert got[0].dtype == np.float64 and (got[0][:, 0] == 1.0).all()
    assert ((got[0][:, 1:] >= 0.0) & (got[0][:, 1:] < 1.0)).all()


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_ignore_index_counts_nothing_as_pytorchs(backend: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    logits0 = rng.normal(size=(6, 5)).astype(np.float32)
    labels = np.array([3, 0, 0, 4, 1, 0], np.int64)  # 0: padding, ignored
    gradfuse.reset()
    logits = gradfuse.Parameter(logits0.copy(), name="logits")
    y = Feeder(lambda: labels, shape=[6], dtype=np.int64, name="labels")
    losses = [
        nn.CrossEntropyLoss(ignore_index=0)(logits, y),
        F.cross_entropy(logits, y, label_smoothing=0.1, ignore_index=0),
        F.nll_loss(F.log_softmax(logits, 1), y, ignore_index=0, reduction="sum"),
        nn.NLLLoss(ignore_index=0, reduction="none")(F.log_softmax(logits, 1), y),
    ]
    (losses[0] + losses[1] * 2.0 + losses[2] * 0.5).backward()
    got = received([*losses, logits.grad], backend)
    t = torch.tensor(logits0, dtype=torch.float64, requires_grad=True)
    ty = torch.tensor(labels)
    want = [
        torch.nn.CrossEntropyLoss(ignore_index=0)(t, ty),
        torch.nn.functional.cross_entropy(t, ty, label_smoothing=0.1, ignore_index=0),
        torch.nn.functional.nll_loss(torch.log_softmax(t, 1), ty, ignore_index=0, reduction="sum"),
        torch.nn.NLLLoss(ignore_index=0, reduction="none")(torch.log_softmax(t, 1), ty),
    ]
    (want[0] + want[1] * 2.0 + want[2] * 0.5).backward()
    for k, (g, w) in enumerate(zip(got, [*want, t.grad], strict=True)):
        # float32 against float64: log-softmax over 5 classes and sums of 6 rows, within
        # 1.8e-7 relative here (2026-12-07, reference and c); the ignored rows' gradients are 0
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=2e-6, atol=1e-7, err_msg=str(k))
    gradfuse.reset()
    y = Feeder(lambda: np.array([1, 7]), shape=[2], dtype=np.int64, name="labels")
    with pytest.raises(GradfuseError, match=r"\[0, 5\) or 0 \(ignore_index\)"):
        received([F.cross_entropy(gradfuse.zeros(2, 5), y, ignore_index=0)])
