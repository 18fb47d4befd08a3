"""The profiler's text helpers, shared by its tables: SI numbers, cut cells, aligned
columns, a launch's sources.

    render([["Kernel", "FLOPs"], ["k0", si(13_100_000)]], right=frozenset({1}))
    # Kernel  FLOPs
    # k0      13.1M
"""

from __future__ import annotations

from collections.abc import Sequence


def si(n: float) -> str:
    """`n` with an SI prefix and 3 digits: 13100000 -> `13.1M`, 512 -> `512`."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def cut(text: str, width: int) -> str:
    """`text`, cut to `width` characters with an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def sources_text(sources: Sequence[str]) -> str:
    """The first two `file:line`s, and how many more: `a.py:3,a.py:9 +2`."""
    more = f" +{len(sources) - 2}" if len(sources) > 2 else ""
    return ",".join(sources[:2]) + more


def render(rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> str:
    """Rows of cells as aligned columns (columns in `right` aligned right)."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if c in right else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(r, widths))
        ).rstrip()
        for r in rows
    )
