"""Provenance of an op: where it was written and what it belongs to.

Stored in the op's MLIR location, so it survives every pass and prints in
generic MLIR (`--print-debuginfo`):

    loc("backward@encoder.layers.1.linear1"("model.py":12:5))

that is a `NameLoc` whose name is `direction@module_path` (or `direction`
alone) around a `FileLineColLoc`. A plain `FileLineColLoc` (a `.tg` file
position) has direction "forward" and no module path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, NameLoc, StringAttr, UnknownLoc
from xdsl.ir import Attribute

DIRECTIONS = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class Provenance:
    """Where an op comes from: file position, module path and direction."""

    file: str | None = None
    line: int = 0
    column: int = 0
    module_path: str | None = None
    direction: str = "forward"

    def to_location(self) -> Attribute:
        """The MLIR location attribute that encodes this provenance (one attribute for
        equal provenances: attributes are values, and the recorder asks once an op)."""
        return _location(self)

    @property
    def source(self) -> str:
        """`file:line` with the file's name only (`model.py:12`), "" without a file."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}" if self.file else ""

    def with_direction(self, direction: str) -> Provenance:
        return Provenance(self.file, self.line, self.column, self.module_path, direction)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "<unknown>"
        path = f" {self.module_path}" if self.module_path else ""
        return f"{where}{path} ({self.direction})"


@lru_cache(maxsize=4096)
def _location(prov: Provenance) -> Attribute:
    """`Provenance.to_location`, built."""
    base: Attribute = UnknownLoc()
    if prov.file is not None:
        base = FileLineColLoc(StringAttr(prov.file), IntAttr(prov.line), IntAttr(prov.column))
    if prov.module_path is None and prov.direction == "forward":
        return base
    name = prov.direction if prov.module_path is None else f"{prov.direction}@{prov.module_path}"
    return NameLoc(StringAttr(name), base)


def provenance_of(loc: Attribute) -> Provenance:
    """Decodes a location attribute written by `Provenance.to_location`."""
    direction, path = "forward", None
    if isinstance(loc, NameLoc):
        name = loc.desc.data
        direction, _, rest = name.partition("@")
        path = rest or None
        if direction not in DIRECTIONS:
            direction, path = "forward", name
        loc = loc.location
    if isinstance(loc, FileLineColLoc):
        return Provenance(loc.filename.data, loc.line.data, loc.column.data, path, direction)
    return Provenance(None, 0, 0, path, direction)
