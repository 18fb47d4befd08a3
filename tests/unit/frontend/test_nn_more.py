"""Pixel shuffles, pads of every mode, 1-d and adaptive max pools, GLU/SELU/CELU/softmin,
distances, the margin and likelihood losses (functional_spatial.py, functional_margin.py
and their modules), `Bilinear` and `init.orthogonal_`: values against float64 NumPy on
reference and c, gradients against PyTorch's float64 where torch is importable
(pytorch/examples' networks that use them: test_example_nets.py)."""

from __future__ import annotations

from collections.abc import Callable

import gradfuse.nn.functional as GF
import numpy as np
import pytest
from weighted_sums import assert_near, gradfuse_run, torch_grads

import gradfuse
from gradfuse import Parameter
from gradfuse.diagnostics import GradfuseError

RNG = np.random.default_rng(5)
IMG = RNG.uniform(-1, 1, (2, 8, 3, 4)).astype(np.float32)
SEQ = RNG.uniform(-1, 1, (2, 3, 8)).astype(np.float32)
A = RNG.uniform(-1, 1, (4, 5)).astype(np.float32)
B = RNG.uniform(-1, 1, (4, 5)).astype(np.float32)
C = RNG.uniform(-1, 1, (4, 5)).astype(np.float32)
Y = np.array([1.0, -1.0, -1.0, 1.0], np.float32)
LABELS = np.array([0.0, 4.0, 2.0, 2.0], np.float32)
SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805


def np_softmax(x: np.ndarray, d: int) -> np.ndarray:
    e = np.exp(x - x.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


def np_norm(x: np.ndarray) -> np.ndarray:
    return np.sqrt((x * x).sum(-1))


def np_shuffle(x: np.ndarray, r: int) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)  # noqa: E501


def np_unfold(x: np.ndarray, k: int, pad: int, stride: int) -> np.ndarray:
    """im2col: [N, C k k, L], channel-major, then the kernel's rows and columns."""
    n, c, h, w = x.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = [x[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride] for i in range(k) for j in range(k)]  # noqa: E501
    return np.stack(cols, 2).reshape(n, c * k * k, oh * ow)


# name: (program on either library's F, float64 NumPy of the value, inputs)
Case = tuple[Callable, Callable, list[np.ndarray]]
CASES: dict[str, Case] = {
    "pixel_shuffle": (lambda F, x: F.pixel_shuffle(x, 2), lambda x: np_shuffle(x, 2), [IMG]),
    "pixel_unshuffle": (
        lambda F, x: F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2), lambda x: x, [IMG],
    ),
    "unfold": (lambda F, x: F.unfold(x, 2, padding=1, stride=2), lambda x: np_unfold(x, 2, 1, 2), [IMG]),  # noqa: E501
    "reflect": (
        lambda F, x: F.pad(x, (2, 1, 1, 2), mode="reflect"),
        lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect"), [IMG],
    ),
    "replicate": (
        lambda F, x: F.pad(x, (3, 1), mode="replicate"),
        lambda x: np.pad(x, ((0, 0), (0, 0), (3, 1)), mode="edge"), [SEQ],
    ),
    "circular": (
        lambda F, x: F.pad(x, (1, 2, 2, 0), mode="circular"),
        lambda x: np.pad(x, ((0, 0), (0, 0), (2, 0), (1, 2)), mode="wrap"), [IMG],
    ),
    "max_pool1d": (
        lambda F, x: F.max_pool1d(x, 3, 2, 1),
        lambda x: np.pad(x, ((0, 0), (0, 0), (1, 1)), constant_values=-np.inf)[..., :9].reshape(2, 3, -1)[..., np.arange(4)[:, None] * 2 + np.arange(3)].max(-1), [SEQ],  # noqa: E501
    ),
    "avg_pool1d": (lambda F, x: F.avg_pool1d(x, 2), lambda x: x.reshape(2, 3, 4, 2).mean(-1), [SEQ]),
    "adaptive_avg_pool1d": (
        lambda F, x: F.adaptive_avg_pool1d(x, 4), lambda x: x.reshape(2, 3, 4, 2).mean(-1), [SEQ],
    ),
    "adaptive_max_pool2d": (
        lambda F, x: F.adaptive_max_pool2d(x, (1, 2)), lambda x: x.reshape(2, 8, 1, 3, 2, 2).max((3, 5)), [IMG],  # noqa: E501
    ),
    "glu": (lambda F, a: F.glu(a[:, :4], 1), lambda a: a[:, :2] / (1 + np.exp(-a[:, 2:4])), [A]),
    "selu": (lambda F, a: F.selu(a * 3), lambda a: SELU_S * np.where(a > 0, 3 * a, SELU_A * np.expm1(3 * a)), [A]),  # noqa: E501
    "celu": (lambda F, a: F.celu(a * 3, 0.5), lambda a: np.where(a > 0, 3 * a, 0.5 * np.expm1(6 * a)), [A]),  # noqa: E501
    "softmin": (lambda F, a: F.softmin(a, 1), lambda a: np_softmax(-a, 1), [A]),
    "cosine_similarity": (
        lambda F, a, b: F.cosine_similarity(a, b),
        lambda a, b: (a * b).sum(1) / (np_norm(a) * np_norm(b)), [A, B],
    ),
    "pairwise_distance": (lambda F, a, b: F.pairwise_distance(a, b), lambda a, b: np_norm(a - b + 1e-6), [A, B]),  # noqa: E501
    "margin_ranking": (
        lambda F, a, b: F.margin_ranking_loss(a[:, 0], b[:, 0], F_y(F), margin=0.1),
        lambda a, b: np.maximum(-Y * (a[:, 0] - b[:, 0]) + 0.1, 0).mean(), [A, B],
    ),
    "hinge_embedding": (
        lambda F, a: F.hinge_embedding_loss(a[:, 0] * 2, F_y(F), reduction="sum"),
        lambda a: np.where(Y == 1, 2 * a[:, 0], np.maximum(1 - 2 * a[:, 0], 0)).sum(), [A],
    ),
    "soft_margin": (
        lambda F, a: F.soft_margin_loss(a[:, 0], F_y(F)), lambda a: np.log1p(np.exp(-Y * a[:, 0])).mean(), [A],  # noqa: E501
    ),
    "cosine_embedding": (
        lambda F, a, b: F.cosine_embedding_loss(a, b, F_y(F), margin=0.2),
        lambda a, b: np.where(Y == 1, 1 - (a * b).sum(1) / (np_norm(a) * np_norm(b)), np.maximum((a * b).sum(1) / (np_norm(a) * np_norm(b)) - 0.2, 0)).mean(),  # noqa: E501
        [A, B],
    ),
    "triplet": (
        lambda F, a, b, c: F.triplet_margin_loss(a, b, c, swap=True),
        lambda a, b, c: np.maximum(1 + np_norm(a - b + 1e-6) - np.minimum(np_norm(a - c + 1e-6), np_norm(b - c + 1e-6)), 0).mean(),  # noqa: E501
        [A, B, C],
    ),
    "poisson_nll": (
        lambda F, a, b: F.poisson_nll_loss(a, (b + 1) * 2, full=True),
        lambda a, b: (np.exp(a) - 2 * (b + 1) * a + np.where(2 * (b + 1) > 1, 2 * (b + 1) * np.log(2 * (b + 1)) - 2 * (b + 1) + 0.5 * np.log(2 * np.pi * 2 * (b + 1)), 0)).mean(),  # noqa: E501
        [A, B],
    ),
    "gaussian_nll": (
        lambda F, a, b, c: F.gaussian_nll_loss(a, b, c[:, 0] * c[:, 0] + 0.1),
        lambda a, b, c: (0.5 * (np.log(c[:, :1] ** 2 + 0.1) + (a - b) ** 2 / (c[:, :1] ** 2 + 0.1))).mean(),  # noqa: E501
        [A, B, C],
    ),
    "multilabel_soft_margin": (
        lambda F, a, b: F.multilabel_soft_margin_loss(a * 3, (b > 0).float()),
        lambda a, b: (-((b > 0) * np.log(1 / (1 + np.exp(-3 * a))) + (b <= 0) * np.log(1 / (1 + np.exp(3 * a))))).mean(),  # noqa: E501
        [A, B],
    ),
    "multi_margin": (
        lambda F, a: F.multi_margin_loss(a, F_labels(F), p=2, margin=0.5),
        lambda a: (np.where(np.arange(5) != LABELS[:, None], np.maximum(0.5 - a[np.arange(4), LABELS.astype(int)][:, None] + a, 0) ** 2, 0).sum(1) / 5).mean(),  # noqa: E501
        [A],
    ),
}  # fmt: skip


def F_y(F):  # noqa: ANN001, ANN201, N802 (the +-1 labels as the library's tensor)
    return F.y


def F_labels(F):  # noqa: ANN001, ANN201, N802
    return F.labels


class Lib:
    """A library's `F`, with the labels as its tensors."""

    def __init__(self, functional, tensor, labels_dtype) -> None:  # noqa: ANN001
        self.f, self.y = functional, tensor(Y)
        self.labels = tensor(LABELS, labels_dtype)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.f, name)


# Float32 against float64, measured 2026-12-08 (reference, and c with -march=native on a
# Sapphire Rapids and with -march=x86-64 -mno-fma): within 1.3e-7 of the largest
# magnitude of each result (gaussian_nll; losses are means of up to 20 terms of exp, log
# and square roots of numbers below 6); 2e-6 is 15 times that, and bounds 16 roundings of
# 2^-24 on sums of |terms| up to 2 times the result. Moves (shuffles, pads, max pools)
# are exact.
TOL = 2e-6


def run(name: str, backend: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The case's value and the gradients of its weighted sum, from gradfuse."""
    f, _, arrays = CASES[name]
    def program(*params: Parameter) -> gradfuse.Tensor:  # (the labels made after reset())
        lib = Lib(GF, lambda a, dtype=None: gradfuse.tensor(np.asarray(a, np.float32)), None)
        return f(lib, *params)  # type: ignore[no-any-return]

    return gradfuse_run(program, arrays, backend)


@pytest.mark.parametrize("backend", ["reference", "c"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_are_float64_numpys(name: str, backend: str) -> None:
    _, value, arrays = CASES[name]
    assert_near(run(name, backend)[0], value(*(a.astype(np.float64) for a in arrays)), TOL)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_are_pytorchs(name: str) -> None:
    torch = pytest.importorskip("torch")
    f, _, arrays = CASES[name]
    lib = Lib(torch.nn.functional, lambda a, dtype=torch.float64: torch.tensor(a, dtype=dtype), torch.long)  # fmt: skip
    for got, want in zip(run(name, "c")[1], torch_grads(torch, lambda *ts: f(lib, *ts), arrays), strict=True):  # fmt: skip
        assert_near(got, want, TOL)


def test_bilinear_and_modules_are_pytorchs() -> None:
    """`Bilinear` with PyTorch's weights, and each new module against its function."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    gradfuse.reset()
    gradfuse.manual_seed(0)
    layer = gradfuse.nn.Bilinear(5, 5, 3)
    theirs = nn.Bilinear(5, 5, 3).double()
    theirs.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in layer.state_dict().items()})  # fmt: skip
    x = gradfuse.tensor(IMG)
    pairs = [
        (layer(gradfuse.tensor(A), gradfuse.tensor(B)), theirs(torch.tensor(A, dtype=torch.float64), torch.tensor(B, dtype=torch.float64))),  # noqa: E501
        (gradfuse.nn.PixelShuffle(2)(x), nn.PixelShuffle(2)(torch.tensor(IMG))),
        (gradfuse.nn.ReflectionPad2d((1, 0, 2, 1))(x), nn.ReflectionPad2d((1, 0, 2, 1))(torch.tensor(IMG))),  # noqa: E501
        (gradfuse.nn.ZeroPad2d(1)(x), nn.ZeroPad2d(1)(torch.tensor(IMG))),
        (gradfuse.nn.AdaptiveMaxPool2d(1)(x), nn.AdaptiveMaxPool2d(1)(torch.tensor(IMG))),
        (gradfuse.nn.MaxPool1d(2)(gradfuse.tensor(SEQ)), nn.MaxPool1d(2)(torch.tensor(SEQ))),
        (gradfuse.nn.SELU()(x), nn.SELU()(torch.tensor(IMG))),
        (gradfuse.nn.GLU(1)(x), nn.GLU(1)(torch.tensor(IMG))),
        (gradfuse.nn.Unfold(3, padding=1)(x), nn.Unfold(3, padding=1)(torch.tensor(IMG))),
        (gradfuse.nn.TripletMarginLoss(margin=0.5)(*map(gradfuse.tensor, (A, B, C))), nn.TripletMarginLoss(margin=0.5)(*map(torch.tensor, (A, B, C)))),  # noqa: E501
    ]
    for ours, want in pairs:
        np.testing.assert_allclose(ours.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_orthogonal_init_is_orthogonal() -> None:
    """Rows (columns, where there are more rows) orthonormal, times the gain."""
    gradfuse.manual_seed(0)
    for shape in [(32, 64, 3, 3), (64, 8), (8, 5)]:
        w = Parameter(np.zeros(shape, np.float32))
        gradfuse.nn.init.orthogonal_(w, gain=2.0)
        m = w.host.reshape(shape[0], -1).astype(np.float64)
        gram = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
        np.testing.assert_allclose(gram / 4, np.eye(len(gram)), atol=2e-6)


def test_what_they_cannot_take_is_a_clear_error() -> None:
    gradfuse.reset()
    x = gradfuse.tensor(IMG)
    for call, words in [
        (lambda: GF.pixel_shuffle(x, 3), "8 channels are not divisible by upscale_factor"),
        (lambda: GF.pad(x, (4, 4), mode="reflect"), "reflect padding \\(4, 4\\) must be less"),
        (lambda: GF.pad(x, (1, 1), mode="mirror"), "pad: mode must be"),
        (lambda: GF.adaptive_max_pool2d(x, 2), "only sizes that divide"),
        (lambda: GF.glu(x, 2), "glu: dim 2 has odd size 3"),
        (lambda: GF.multi_margin_loss(gradfuse.tensor(A), gradfuse.tensor(LABELS), p=3), "p must be 1 or 2"),  # noqa: E501
    ]:
        with pytest.raises(GradfuseError, match=words):
            call()

