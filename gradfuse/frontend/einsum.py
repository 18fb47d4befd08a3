"""PyTorch's `einsum`, composed of tg ops (no op of its own): each pair of operands is
one batched `tg.dot` (matmul) of the operands permuted and reshaped to [batch, kept, summed]
and [batch, summed, kept], so the contraction runs as the matmul kernels do; a
letter only one operand has and the result lacks is summed first, a letter repeated in
one operand takes the diagonal (a product with the identity, summed):

    gradfuse.einsum("bij,bjk->bik", q, k)     # %d = tg.dot %q, %k   (no permute)
    gradfuse.einsum("bhqd,bhkd->bhqk", q, k)  # tg.permute k to b h d k, tg.dot
    gradfuse.einsum("ii", a)                  # the trace
    gradfuse.einsum("...ij,...j", m, v)       # implicit output: ... and i

Operands are combined left to right; sizes of 1 broadcast, as in PyTorch.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Any

from gradfuse.frontend.recorder import error

if TYPE_CHECKING:
    from gradfuse.frontend.tensor import Tensor

Labelled = tuple["Tensor", list[str]]


def einsum(equation: str, *operands: Any) -> Tensor:
    """The sum of products that `equation` names, as `torch.einsum`: letters label
    dims, `...` the dims left over, `->` the result's labels (else the ellipsis, then
    the letters seen once, in order); labels the result lacks are summed, `...`'s too.
    `gradfuse.einsum("ij,jk->ik", a, b)`"""
    from gradfuse.frontend.tensor import Tensor

    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])  # torch.einsum("ij,jk", [a, b])
    if not isinstance(equation, str):
        raise error(f"einsum: the equation must be a str, got {type(equation).__name__}")
    if not operands or not all(isinstance(x, Tensor) for x in operands):
        raise error("einsum: expects tensors after the equation")
    terms, output = _parse(equation, list(operands))
    pairs: list[Labelled] = [_diagonal(x, labels) for x, labels in zip(operands, terms, strict=True)]
    sizes = _sizes(pairs)
    for k, (x, labels) in enumerate(pairs):  # a label no one else needs: summed first
        others = {c for j, (_, other) in enumerate(pairs) if j != k for c in other}
        pairs[k] = _sum_out(x, labels, set(output) | others)
    x, labels = pairs[0]
    for k in range(1, len(pairs)):
        later = {c for _, other in pairs[k + 1 :] for c in other}
        x, labels = _contract((x, labels), pairs[k], set(output) | later, sizes)
    x, labels = _sum_out(x, labels, set(output))
    x = _broadcast_to(x, labels, sizes)
    return x.permute([labels.index(c) for c in output]) if len(output) > 1 else x


def _parse(equation: str, operands: list[Tensor]) -> tuple[list[list[str]], list[str]]:
    """Each operand's labels and the result's, `...` expanded to labels `0`, `1`, ...
    (the last dims; an operand with fewer takes the rightmost, as broadcasting does)."""
    text = equation.replace(" ", "")
    inputs, arrow, result = text.partition("->")
    parts = inputs.split(",")
    if len(parts) != len(operands):
        raise error(f"einsum: {equation!r} names {len(parts)} operands, got {len(operands)}")
    spans = []
    for part, x in zip(parts, operands, strict=True):
        letters = part.replace("...", "")
        if part.count("...") > 1 or not all(c.isalpha() and c.isascii() for c in letters):
            raise error(f"einsum: {part!r} in {equation!r}: labels are letters and one ...")
        rest = x.ndim - len(letters)
        if rest < 0 or ("..." not in part and rest):
            raise error(f"einsum: {part!r} labels {len(letters)} dims of a tensor of rank {x.ndim}")  # fmt: skip
        spans.append(rest)
    width = max(spans)
    terms = [_expand(part, rest) for part, rest in zip(parts, spans, strict=True)]
    if arrow:
        letters = result.replace("...", "")
        if result.count("...") > 1 or not all(c.isalpha() and c.isascii() for c in letters):
            raise error(f"einsum: {result!r} in {equation!r}: labels are letters and one ...")
        output = _expand(result, width) if "..." in result else list(result)
        seen = {c for term in terms for c in term}
        for c in output:
            if output.count(c) > 1 or c not in seen:
                why = "repeats" if c in seen else "is on no operand"
                raise error(f"einsum: {equation!r}: the result's label {c!r} {why}")
    else:
        counts: dict[str, int] = {}
        for c in (c for term in terms for c in term if c.isalpha()):
            counts[c] = counts.get(c, 0) + 1
        output = [str(k) for k in range(-width, 0)] + sorted(c for c, n in counts.items() if n == 1)
    return terms, output


def _expand(part: str, rest: int) -> list[str]:
    """The labels of `part` with `...` as `rest` numbered labels (the rightmost dims)."""
    head, _, tail = part.partition("...")
    return [*head, *(str(k) for k in range(-rest, 0)), *tail] if "..." in part else list(part)


def _sizes(pairs: list[Labelled]) -> dict[str, int]:
    """Each label's size; a 1 broadcasts, other sizes must agree."""
    sizes: dict[str, int] = {}
    for x, labels in pairs:
        for c, n in zip(labels, x.shape, strict=True):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                shown = f"{c!r}" if c.isalpha() else "..."
                raise error(f"einsum: label {shown} has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes.get(c, 1), n)
    return sizes


def _diagonal(x: Tensor, labels: list[str]) -> Labelled:
    """A label repeated in one operand (`ii`): its diagonal, a product with the identity
    summed over the second occurrence."""
    from gradfuse.frontend.creation import eye

    while len(set(labels)) < len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        n = x.shape[i]
        if x.shape[j] != n:
            raise error(f"einsum: the repeated label {c!r} has sizes {n} and {x.shape[j]}")
        shape = [n if d in (i, j) else 1 for d in range(x.ndim)]
        x = (x * eye(n).reshape(shape)).sum(j)
        labels = labels[:j] + labels[j + 1 :]
    return x, labels


def _sum_out(x: Tensor, labels: list[str], keep: set[str]) -> Labelled:
    """`x` summed over the labels not in `keep`."""
    dims = [d for d, c in enumerate(labels) if c not in keep]
    if not dims:
        return x, labels
    return x.sum(dims), [c for c in labels if c in keep]


def _broadcast_to(x: Tensor, labels: list[str], sizes: dict[str, int]) -> Tensor:
    """`x` with each dim of size 1 broadcast to its label's size."""
    full = [sizes[c] for c in labels]
    return x if list(x.shape) == full else x.expand(full)


def _contract(a: Labelled, b: Labelled, keep: set[str], sizes: dict[str, int]) -> Labelled:
    """Two operands as one: a batched matmul of [batch, a's own, summed] by [batch,
    summed, b's own] (a broadcast product where nothing is summed)."""
    (x, la), (y, lb) = a, b
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    own_a, own_b = [c for c in la if c not in lb], [c for c in lb if c not in la]
    x = _broadcast_to(x, la, sizes)
    y = _broadcast_to(y, lb, sizes)
    n_batch, n_a, n_b = (prod(sizes[c] for c in group) for group in (batch, own_a, own_b))
    n_sum = prod(sizes[c] for c in summed)
    xs = _arranged(x, la, batch + own_a + summed, [n_batch, n_a, n_sum])
    ys = _arranged(y, lb, batch + summed + own_b, [n_batch, n_sum, n_b])
    product = xs @ ys if summed else xs * ys.reshape([n_batch, 1, n_b])
    labels = batch + own_a + own_b
    return product.reshape([sizes[c] for c in labels]), labels


def _arranged(x: Tensor, labels: list[str], order: list[str], shape: list[int]) -> Tensor:
    """`x` permuted to `order` and reshaped to `shape` (no permute when in order)."""
    perm = [labels.index(c) for c in order]
    if perm != list(range(len(perm))):
        x = x.permute(perm)
    return x.reshape(shape)
