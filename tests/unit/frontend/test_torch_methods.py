"""PyTorch's tensor methods that gradfuse composes of other ops
(gradfuse/frontend/tensor_reduce.py, tensor_shape.py): what they return and how they
differentiate, against NumPy (values, first indices, the gradient each element gets)
and PyTorch where it is importable."""

from __future__ import annotations

import gradfuse.nn.functional as F
import numpy as np
import pytest

import gradfuse
from gradfuse import Feeder, Parameter, Receiver, Tensor, execute
from gradfuse.diagnostics import GradfuseError

TIES = np.random.default_rng(3).integers(0, 4, size=(3, 5, 4)).astype(np.float32)
"""Small integers: every row has tied maxima and minima (the first one's index counts)."""


def run(backend: str, build, x0: np.ndarray = TIES) -> list[np.ndarray]:  # noqa: ANN001
    """`build(p)` of a parameter holding `x0`: it returns (loss, [outputs]); the outputs
    and the loss's gradient wrt p, computed by `backend` in float32."""
    gradfuse.reset()
    p = Parameter(x0.copy(), name="p")
    loss, outputs = build(p)
    loss.backward()
    got: list[np.ndarray] = []
    Receiver(lambda *v: got.extend(v), [*outputs, p.grad])
    execute(backend=backend)
    return got


def one_hot_at(index: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """1 at the given index along `axis` (shape of `x` without it), else 0."""
    out = np.zeros_like(x)
    np.put_along_axis(out, np.expand_dims(index, axis), 1.0, axis)
    return out


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_max_and_min_along_a_dim_give_values_and_first_indices(backend: str) -> None:
    def build(p: Tensor):  # noqa: ANN202
        v, i = p.max(1)
        w, j = p.min(-1, keepdim=True)
        return (v * 2.0).sum() + (w * 3.0).sum(), [v, i, w, j]

    v, i, w, j, grad = run(backend, build)
    np.testing.assert_array_equal(v, TIES.max(1))
    np.testing.assert_array_equal(i, TIES.argmax(1))  # NumPy's first maximum, as PyTorch
    np.testing.assert_array_equal(w, TIES.min(-1, keepdims=True))
    np.testing.assert_array_equal(j, TIES.argmin(-1)[..., None])
    want = 2.0 * one_hot_at(TIES.argmax(1), TIES, 1) + 3.0 * one_hot_at(TIES.argmin(-1), TIES, 2)
    np.testing.assert_array_equal(grad, want)  # the indexed element alone, ties or not


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_amax_shares_the_gradient_among_ties_and_argmax_flattens(backend: str) -> None:
    def build(p: Tensor):  # noqa: ANN202
        m = p.amax((0, 2))
        return m.sum(), [m, p.amin(), p.argmax(), p.argmin(0), p.max(), p.max(p * 0.0 + 1.5)]

    m, lo, am, an, top, elementwise, grad = run(backend, build)
    np.testing.assert_array_equal(m, TIES.max((0, 2)))
    assert lo.shape == () and lo == TIES.min() and top == TIES.max()
    assert am.shape == () and am == TIES.argmax()
    np.testing.assert_array_equal(an, TIES.argmin(0))
    np.testing.assert_array_equal(elementwise, np.maximum(TIES, 1.5))
    tied = TIES == TIES.max((0, 2), keepdims=True)
    np.testing.assert_allclose(grad, tied / tied.sum((0, 2), keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_clamp_passes_the_gradient_between_its_bounds_inclusive(backend: str) -> None:
    def build(p: Tensor):  # noqa: ANN202
        c = p.clamp(1.0, 2.5)
        return (c * c).sum() + p.clip(max=2.0).sum(), [c, p.clamp(min=2.0)]

    c, low, grad = run(backend, build)
    np.testing.assert_array_equal(c, np.clip(TIES, 1.0, 2.5))
    np.testing.assert_array_equal(low, np.maximum(TIES, 2.0))
    inside = (TIES >= 1.0) & (TIES <= 2.5)  # 1.0 and 2.0 sit on a bound: they pass
    np.testing.assert_array_equal(grad, 2.0 * TIES * inside + (TIES <= 2.0))


def test_the_methods_match_pytorch() -> None:
    """The same expressions in PyTorch, written as its users write them."""
    torch = pytest.importorskip("torch")

    def build(p: Tensor):  # noqa: ANN202
        v, i = p.max(dim=1)
        outs = [v, i, p.min(0)[0], p.argmax(dim=2, keepdim=True), p.clamp(min=1.0), p.t()
                if p.dim() == 2 else p.flatten(1), p.transpose(0, 1).contiguous().rsqrt(),
                p.pow(2), p[:, :1].expand(-1, 5, -1)]  # fmt: skip
        return v.sum() + p.min(0)[0].sum() + p.clamp(min=1.0).sum(), outs

    x0 = TIES + 1.0
    got = run("reference", build, x0)
    t = torch.tensor(x0, requires_grad=True)
    v, i = t.max(dim=1)
    want = [v, i, t.min(0)[0], t.argmax(dim=2, keepdim=True), t.clamp(min=1.0), t.flatten(1),
            t.transpose(0, 1).contiguous().rsqrt(), t.pow(2), t[:, :1].expand(-1, 5, -1)]  # fmt: skip
    (v.sum() + t.min(0)[0].sum() + t.clamp(min=1.0).sum()).backward()
    for g, w in zip(got, [*want, t.grad], strict=True):
        w = w.detach().numpy()
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def feeder(*shape: int) -> Tensor:
    return Feeder(lambda: np.zeros(shape, np.float32), shape=list(shape), name="x")


def test_shapes_of_the_shape_methods() -> None:
    x = feeder(2, 3, 4, 5)
    assert x.flatten().shape == (120,) and x.flatten(1).shape == (2, 60)
    assert x.flatten(1, 2).shape == (2, 12, 5) and x.flatten(-2).shape == (2, 3, 20)
    assert x.dim() == 4 and x.contiguous() is x
    assert x[0, 0].t().shape == (5, 4) and x[0, 0, 0].t().shape == (5,)
    assert x[:, :1].expand(-1, 3, 4, 5).shape == (2, 3, 4, 5)
    assert x[0, :1, :1, :].expand(7, 1, 2, -1, -1).shape == (7, 1, 2, 1, 5)
    assert x.max(1).values.shape == x.max(1).indices.shape == (2, 4, 5)
    assert x.amax((1, 2), keepdim=True).shape == (2, 1, 1, 5) and x.amin().shape == ()
    assert F.relu(x, inplace=True).shape == x.shape  # (the tracer's values stay its own)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: x.max((0, 1)), "max(dim): dim must be an int, as in PyTorch, got (0, 1)"),
        (lambda x: x.min(dim=[1]), "amin(dims) reduces several dims"),
        (lambda x: x.t(), "t() expects a tensor with <= 2 dimensions, but self is 4D"),
        (lambda x: x.expand(2, 4, 4, 5), "expanded size 4 must match the existing size 3"),
        (lambda x: x.expand(3, 4), "number of sizes (2) must be at least the tensor's rank"),
        (lambda x: x.expand(-1, 2, 3, 4, 5), "-1 is not allowed for the new leading dim 0"),
        (lambda x: x.flatten(2, 1), "start_dim 2 and end_dim 1 do not fit"),
        (lambda x: x.clamp(), "at least one of min and max"),
        (lambda x: x.argmax(4), "argmax: dim 4 is out of range"),
        (lambda x: x.split([1, 1], dim=1), "sizes [1, 1] must be >= 0 and add up to dim 1's 3"),
        (lambda x: x.chunk(0), "the number of chunks must be positive"),
        (lambda x: x.var(1, True, correction=0), "give correction or unbiased, not both"),
        (lambda x: x.norm(3), "p must be 1, 2, 'fro' or inf, got 3"),
        (lambda x: F.pad(x, (1, 1), mode="mirror"), "pad: mode must be 'constant', 'reflect', 'replicate' or 'circular'"),
        (lambda x: F.pad(x, (1, -1)), "negative pads are not supported"),
        (lambda x: F.pad(x, (1,)), "needs (before, after) pairs for at most 4 dims"),
        (lambda x: F.hardtanh(x, 1.0, -1.0), "min_val 1.0 must not exceed max_val -1.0"),
        (lambda x: F.interpolate(x, scale_factor=1.5), "only whole factors of at least 1"),
        (lambda x: F.interpolate(x, size=(8, 10), mode="bilinear"), "only mode='nearest'"),
        (lambda x: F.group_norm(x, 2), "needs a channel dim 1 that 2 groups divide"),
        (lambda x: F.prelu(x, x[0, 0, 0, :]), "must hold 1 slope or one a channel"),
        (lambda x: x.repeat(2, 2), "needs a count >= 0 for each of the tensor's 4 dims"),
    ],
)
def test_misuse_is_an_error_at_the_call(call, message: str) -> None:  # noqa: ANN001
    x = feeder(2, 3, 4, 5)
    with pytest.raises(GradfuseError, match="test_torch_methods.py") as info:
        call(x)
    assert message in str(info.value)


KINKS = np.array([[-30.0, -1.0, -0.5, 0.0, 0.5, 1.0, 11.0, 30.0]], np.float32)
"""Where the activations bend: 0 (elu), the bounds of hardtanh, beta * x = threshold
(softplus with beta 2 and threshold 20 at 10) and far beyond."""


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_activations_and_pad_match_pytorch_at_their_kinks(backend: str) -> None:
    torch = pytest.importorskip("torch")
    import gradfuse.nn as gnn

    def ours(p: Tensor):  # noqa: ANN202
        outs = [F.silu(p), gnn.ELU(0.5)(p), F.softplus(p, beta=2.0), gnn.Softplus()(p),
                F.hardtanh(p), gnn.Hardtanh(-0.5, 1.0)(p), F.pad(p, (1, 2, 1, 0), value=0.5)]  # fmt: skip
        weights = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
        return sum((o * w).sum() for o, w in zip(outs, weights)), outs

    got = run(backend, ours, KINKS)
    t = torch.tensor(KINKS, requires_grad=True)
    outs = [torch.nn.functional.silu(t), torch.nn.ELU(0.5)(t),
            torch.nn.functional.softplus(t, beta=2.0), torch.nn.Softplus()(t),
            torch.nn.functional.hardtanh(t), torch.nn.Hardtanh(-0.5, 1.0)(t),
            torch.nn.functional.pad(t, (1, 2, 1, 0), value=0.5)]  # fmt: skip
    sum((o * w).sum() for o, w in zip(outs, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])).backward()
    for g, w in zip(got, [*outs, t.grad], strict=True):
        # Against PyTorch's float64 run, ours is within 7.4e-8 (1.2 units of 2^-24: a few
        # float32 roundings of exp, log1p and a product; the same with and without FMA)
        # and PyTorch's float32 within 6e-8, so the two within 1.4e-7: 5e-7 is 3.5 times
        # that. The kinks' gradients (0, the bounds, the threshold) are exact.
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=5e-7, atol=1e-7)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_var_std_norm_split_and_chunk_match_numpy(backend: str) -> None:
    x0 = np.random.default_rng(5).normal(size=(3, 7, 2)).astype(np.float32)

    def build(p: Tensor):  # noqa: ANN202
        a, b, c = p.split([2, 4, 1], dim=1)
        parts = p.chunk(3, dim=1)
        outs = [p.var(1), p.std((0, 2), keepdim=True), p.var(False), p.var(1, correction=0),
                p.norm(), p.norm(1, dim=0), p.norm(float("inf"), dim=2), a, b, c,
                *parts, *p.split(3, -2)]  # fmt: skip
        return p.std(1).sum() + p.norm(), outs

    got = run(backend, build, x0)
    x = x0.astype(np.float64)
    want = [x.var(1, ddof=1), x.std((0, 2), ddof=1, keepdims=True), x.var(), x.var(1),
            np.sqrt((x * x).sum()), np.abs(x).sum(0), np.abs(x).max(2),
            x[:, :2], x[:, 2:6], x[:, 6:], x[:, :3], x[:, 3:6], x[:, 6:],
            x[:, :3], x[:, 3:6], x[:, 6:]]  # fmt: skip
    s = x.std(1, ddof=1, keepdims=True)
    grad = (x - x.mean(1, keepdims=True)) / (6 * s) + x / np.sqrt((x * x).sum())
    for g, w in zip(got, [*want, grad], strict=True):
        assert g.shape == w.shape
        # float32 sums of at most 42 terms: within 42 * 2^-24 = 2.5e-6 of float64's, the
        # squares and the square root a unit or two more; 1e-5 is 4 times that
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_nll_loss_of_log_softmax_is_cross_entropy(backend: str) -> None:
    """PyTorch's MNIST example: `F.nll_loss(F.log_softmax(x, dim=1), target)` and
    `nn.NLLLoss`, against `F.cross_entropy` of the same logits (the same ops: equal)."""
    import gradfuse.nn as gnn

    x0 = np.random.default_rng(9).normal(size=(4, 5, 3)).astype(np.float32)
    labels = np.array([[0, 4, 2], [1, 1, 3], [4, 0, 0], [2, 3, 1]], np.float32)

    def build(p: Tensor):  # noqa: ANN202
        t = Feeder(lambda: labels, shape=[4, 3], name="t")
        logp = F.log_softmax(gradfuse.flatten(p, 2).reshape(4, 5, 3), dim=1)
        nll = F.nll_loss(logp, t)
        outs = [nll, gnn.NLLLoss(reduction="none")(logp, t), F.cross_entropy(p, t)]
        return nll, outs

    nll, each, ce, grad = run(backend, build, x0)
    np.testing.assert_array_equal(nll, ce)
    x = x0.astype(np.float64)
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    want = -np.take_along_axis(logp, labels[:, None].astype(int), 1)[:, 0]
    # From the float64 run of these ops: the losses within 5.1e-8 relative, the gradients
    # within 2.9e-7 relative and 5.9e-9 absolute (a probability minus the one-hot, /12,
    # cancels where the probability is near 1); the bounds below are 4 and 3.5 times those.
    np.testing.assert_allclose(each, want, rtol=2e-7)
    one_hot = (np.arange(5)[None, :, None] == labels[:, None]).astype(np.float32)
    np.testing.assert_allclose(grad, (np.exp(logp) - one_hot) / 12, rtol=1e-6, atol=2e-8)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_norms_prelu_upsample_and_repeat_match_pytorch(backend: str) -> None:
    """Values and gradients against PyTorch's float64 run, the modules as PyTorch
    builds them (`GroupNorm`'s and `PReLU`'s parameters set to other values first)."""
    torch = pytest.importorskip("torch")
    import gradfuse.nn as gnn

    x0 = np.random.default_rng(11).normal(size=(2, 4, 3, 5)).astype(np.float32)
    gn_w = np.linspace(0.5, 2.0, 4).astype(np.float32)
    slopes = np.array([0.1, -0.2, 0.3, 0.25], np.float32)
    weights = [1.0, 2.0, -1.0, 0.5, 3.0, 1.5, -2.0, 0.7]

    def ours(p: Tensor):  # noqa: ANN202
        gn = gnn.GroupNorm(2, 4)
        gn.weight.data[:] = gn_w  # type: ignore[union-attr]
        pr = gnn.PReLU(4)
        pr.weight.data[:] = slopes
        outs = [gn(p), gnn.InstanceNorm2d(4)(p), F.normalize(p, dim=1), pr(p), gnn.PReLU()(p),
                gnn.Upsample(scale_factor=2)(p), F.interpolate(p, size=(6, 15)),
                p.repeat(1, 2, 1, 2)]  # fmt: skip
        return sum((o * o.sin() * w).sum() for o, w in zip(outs, weights)), outs

    got = run(backend, ours, x0)
    t = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    tn, tF = torch.nn, torch.nn.functional
    gn = tn.GroupNorm(2, 4).double()
    gn.weight.data[:] = torch.tensor(gn_w)
    pr = tn.PReLU(4).double()
    pr.weight.data[:] = torch.tensor(slopes)
    outs = [gn(t), tn.InstanceNorm2d(4)(t), tF.normalize(t, dim=1), pr(t), tn.PReLU().double()(t),
            tn.Upsample(scale_factor=2)(t), tF.interpolate(t, size=(6, 15)),
            t.repeat(1, 2, 1, 2)]  # fmt: skip
    sum((o * o.sin() * w).sum() for o, w in zip(outs, weights)).backward()
    # float32 against float64 (reference and c, AVX2 with and without FMA, 2026-12-07):
    # the outputs within 5.7e-7 absolute (a float32 norm or deviation of at most 30
    # terms divides them), the gradient, which sums the 8 outputs' contributions of up
    # to 6 in size that cancel, within 4.0e-6 absolute; the bounds are 5 times those.
    for g, w in zip(got, outs, strict=False):
        w = w.detach().numpy()
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=3e-6)
    np.testing.assert_allclose(got[-1], t.grad.numpy(), rtol=0, atol=2e-5)


@pytest.mark.parametrize("backend", ["reference", "c"])
def test_dropout2d_zeroes_whole_channels(backend: str) -> None:
    """Each of 2,048 channels is zero or the input scaled by 1 / (1 - p), the gradient
    likewise; the share dropped is within 4 standard deviations of p (seeded: the same
    every run); in eval mode the module is the identity."""
    import gradfuse.nn as gnn

    x0 = np.random.default_rng(12).uniform(0.5, 1.5, size=(64, 32, 2, 3)).astype(np.float32)
    gradfuse.manual_seed(4)

    def build(p: Tensor):  # noqa: ANN202
        y = gnn.Dropout2d(0.25)(p)
        still = gnn.Dropout2d(0.25).eval()(p)
        return (y * 3.0).sum(), [y, still]

    y, still, grad = run(backend, build, x0)
    kept = (y != 0).reshape(64, 32, 6)
    assert (kept.all(-1) | ~kept.any(-1)).all()  # whole channels
    np.testing.assert_allclose(y, x0 * kept.reshape(y.shape) / 0.75, rtol=1e-6)
    np.testing.assert_allclose(grad, 3.0 * kept.reshape(y.shape) / 0.75, rtol=1e-6)
    dropped = 1.0 - kept.all(-1).mean()
    assert abs(dropped - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 2048)
    np.testing.assert_array_equal(still, x0)
