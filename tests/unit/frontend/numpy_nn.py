"""Float64 NumPy references for the nn tests: a tiny reverse-mode tape, layers, optimizers.

Written independently of gradfuse (no tg ops), to check it against:

    p = {k: V(v) for k, v in state.items()}
    loss = mse(encoder_layer(p, V(x), heads=2, ...), target); loss.backward()
    p["linear1.weight"].grad
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Vjp = Callable[[np.ndarray], np.ndarray]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    while g.ndim > len(shape):
        g = g.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdims=True)
    return g


class V:
    """A float64 array on a tape: `(V(a) * V(b)).sum().backward()` fills `.grad`."""

    def __init__(self, value: np.ndarray | float, parents: tuple[tuple[V, Vjp], ...] = ()):
        self.value = np.asarray(value, dtype=np.float64)
        self.parents = parents
        self.grad = np.zeros_like(self.value)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    def _binary(self, other: V | float, out: np.ndarray, da: Vjp, db: Vjp) -> V:
        o = other if isinstance(other, V) else V(other)
        return V(
            out,
            (
                (self, lambda g: _unbroadcast(da(g), self.shape)),
                (o, lambda g: _unbroadcast(db(g), o.shape)),
            ),
        )

    def __add__(self, o: V | float) -> V:
        ov = o.value if isinstance(o, V) else o
        return self._binary(o, self.value + ov, lambda g: g, lambda g: g)

    __radd__ = __add__

    def __sub__(self, o: V | float) -> V:
        ov = o.value if isinstance(o, V) else o
        return self._binary(o, self.value - ov, lambda g: g, lambda g: -g)

    def __rsub__(self, o: float) -> V:
        return V(o) - self

    def __mul__(self, o: V | float) -> V:
        ov = o.value if isinstance(o, V) else np.float64(o)
        return self._binary(o, self.value * ov, lambda g: g * ov, lambda g: g * self.value)

    __rmul__ = __mul__

    def __neg__(self) -> V:
        return self * -1.0

    def __matmul__(self, o: V) -> V:
        a, b = self.value, o.value
        return self._binary(
            o, a @ b, lambda g: g @ np.swapaxes(b, -1, -2), lambda g: np.swapaxes(a, -1, -2) @ g
        )

    def unary(self, out: np.ndarray, d: np.ndarray) -> V:
        """An elementwise function with derivative `d`."""
        return V(out, ((self, lambda g: g * d),))

    def exp(self) -> V:
        e = np.exp(self.value)
        return self.unary(e, e)

    def log(self) -> V:
        return self.unary(np.log(self.value), 1.0 / self.value)

    def sqrt(self) -> V:
        s = np.sqrt(self.value)
        return self.unary(s, 0.5 / s)

    def recip(self) -> V:
        return self.unary(1.0 / self.value, -1.0 / self.value**2)

    def relu(self) -> V:
        return self.unary(np.maximum(self.value, 0.0), (self.value > 0).astype(np.float64))

    def tanh(self) -> V:
        t = np.tanh(self.value)
        return self.unary(t, 1.0 - t * t)

    def erf(self) -> V:
        return self.unary(_erf(self.value), 2.0 / math.sqrt(math.pi) * np.exp(-(self.value**2)))

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> V:
        shape = self.shape

        def vjp(g: np.ndarray) -> np.ndarray:
            if axis is not None and not keepdims:
                g = np.expand_dims(g, axis)
            return np.broadcast_to(g, shape)

        return V(self.value.sum(axis, keepdims=keepdims), ((self, vjp),))

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> V:
        n = self.value.size / np.asarray(self.value.sum(axis, keepdims=keepdims)).size
        return self.sum(axis, keepdims) * (1.0 / n)

    def reshape(self, *shape: int) -> V:
        old = self.shape
        return V(self.value.reshape(shape), ((self, lambda g: g.reshape(old)),))

    def transpose(self, *perm: int) -> V:
        inv = np.argsort(perm)
        return V(self.value.transpose(perm), ((self, lambda g: g.transpose(inv)),))

    def __getitem__(self, key: object) -> V:
        def vjp(g: np.ndarray) -> np.ndarray:
            out = np.zeros_like(self.value)
            out[key] += g  # type: ignore[index]
            return out

        return V(self.value[key], ((self, vjp),))  # type: ignore[index]

    def softmax(self, axis: int = -1) -> V:
        e = np.exp(self.value - self.value.max(axis, keepdims=True))
        s = e / e.sum(axis, keepdims=True)
        return V(s, ((self, lambda g: s * (g - (g * s).sum(axis, keepdims=True))),))

    def backward(self) -> None:
        """Fills `.grad` of everything this value depends on (d sum(self))."""
        order: list[V] = []
        seen: set[int] = set()

        def visit(v: V) -> None:
            if id(v) in seen:
                return
            seen.add(id(v))
            for parent, _ in v.parents:
                visit(parent)
            order.append(v)

        visit(self)
        self.grad = np.ones_like(self.value)
        for v in reversed(order):
            for parent, vjp in v.parents:
                parent.grad = parent.grad + vjp(v.grad)


# --- layers (PyTorch's semantics, float64) ----------------------------------------------


def linear(x: V, w: V, b: V | None) -> V:
    y = x @ w.transpose(1, 0)
    return y + b if b is not None else y


def layer_norm(x: V, w: V | None, b: V | None, eps: float = 1e-5) -> V:
    c = x - x.mean(-1, keepdims=True)
    y = c * ((c * c).mean(-1, keepdims=True) + eps).sqrt().recip()
    y = y * w if w is not None else y
    return y + b if b is not None else y


def gelu(x: V, approximate: str = "none") -> V:
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (inner.tanh() + 1.0)
    return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1.0)


def attention(p: dict[str, V], x: V, heads: int, prefix: str = "") -> V:
    """PyTorch's MultiheadAttention on [N, L, E], self-attention, no masks."""
    n, length, e = x.shape
    d = e // heads
    qkv = linear(x, p[prefix + "in_proj_weight"], p[prefix + "in_proj_bias"])

    def split(t: V) -> V:
        return t.reshape(n, length, heads, d).transpose(0, 2, 1, 3)

    q, k, v = split(qkv[..., :e]), split(qkv[..., e : 2 * e]), split(qkv[..., 2 * e :])
    a = ((q * (1.0 / math.sqrt(d))) @ k.transpose(0, 1, 3, 2)).softmax(-1)
    out = (a @ v).transpose(0, 2, 1, 3).reshape(n, length, e)
    return linear(out, p[prefix + "out_proj.weight"], p[prefix + "out_proj.bias"])


def encoder_layer(
    p: dict[str, V], x: V, heads: int, activation: str = "relu", norm_first: bool = False
) -> V:
    """PyTorch's TransformerEncoderLayer (batch_first, dropout 0) on [N, L, E]."""

    def sa(h: V) -> V:
        return attention(p, h, heads, "self_attn.")

    def ff(h: V) -> V:
        h = linear(h, p["linear1.weight"], p["linear1.bias"])
        h = h.relu() if activation == "relu" else gelu(h)
        return linear(h, p["linear2.weight"], p["linear2.bias"])

    def norm(i: int, h: V) -> V:
        return layer_norm(h, p[f"norm{i}.weight"], p[f"norm{i}.bias"])

    if norm_first:
        x = x + sa(norm(1, x))
        return x + ff(norm(2, x))
    x = norm(1, x + sa(x))
    return norm(2, x + ff(x))


def mse(y: V, t: np.ndarray) -> V:
    d = y - V(t)
    return (d * d).mean()


# --- optimizers -------------------------------------------------------------------------


def sgd_step(p: dict[str, np.ndarray], g: dict[str, np.ndarray], lr: float) -> None:
    for k in p:
        p[k] = p[k] - lr * g[k]


class NumpyAdam:
    """PyTorch's Adam / AdamW (amsgrad optional) in float64."""

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
        amsgrad: bool = False,
    ):
        self.lr, self.betas, self.eps = lr, betas, eps
        self.wd, self.decoupled, self.amsgrad = weight_decay, decoupled, amsgrad
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}
        self.vmax: dict[str, np.ndarray] = {}
        self.t = 0

    def step(self, p: dict[str, np.ndarray], g: dict[str, np.ndarray]) -> None:
        self.t += 1
        b1, b2 = self.betas
        for k in p:
            grad = g[k]
            if self.wd and self.decoupled:
                p[k] = p[k] * (1 - self.lr * self.wd)
            elif self.wd:
                grad = grad + self.wd * p[k]
            m = self.m[k] = b1 * self.m.get(k, 0.0) + (1 - b1) * grad
            v = self.v[k] = b2 * self.v.get(k, 0.0) + (1 - b2) * grad * grad
            if self.amsgrad:
                v = self.vmax[k] = np.maximum(self.vmax.get(k, 0.0), v)
            denom = np.sqrt(v) / math.sqrt(1 - b2**self.t) + self.eps
            p[k] = p[k] - self.lr / (1 - b1**self.t) * m / denom
