"""The `fuses:` lines of a kernel listing (`gradfuse.dump.dump_kernels`), parsed from
text: what the profiler's layers and directions are checked against."""

from __future__ import annotations

import re

_ORIGIN = re.compile(r"^(?:(\S+) )?\((forward|backward|optimizer)\)")


def fuses(listing: str) -> dict[str, set[tuple[str | None, str]]]:
    """Kernel symbol -> the (layer, direction) pairs of its `fuses:` line, parsed from text."""
    found: dict[str, set[tuple[str | None, str]]] = {}
    current = None
    for line in listing.splitlines():
        text = line.strip()
        head = re.match(r"^(k\d+) (elementwise|reduction|contraction) \[", text)
        if head:
            current = head.group(1)
            found[current] = set()
        elif text.startswith("fuses: ") and current is not None:
            for origin in text.removeprefix("fuses: ").split("; "):
                m = _ORIGIN.match(origin)
                assert m, origin
                found[current].add((m.group(1), m.group(2)))
    return found
