"""One error type for everything a user can get wrong, printed as one diagnostic.

    examples/bad.tg:3:8: error: tg.dot: inner dimensions differ: 2x255 @ 254x255
      %y = tg.dot %x, %w : tensor<2x255xf32>
           ^

Tools catch `GradfuseError`, print `str(err)` to stderr and exit with status 1:
never a Python traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import FileLineColLoc, FusedLoc, NameLoc
from xdsl.ir import Attribute
from xdsl.utils.exceptions import DiagnosticException


@dataclass(frozen=True)
class Position:
    """A place in a source file (1-based line and column), with its text line."""

    file: str
    line: int
    column: int
    source_line: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class GradfuseError(DiagnosticException):
    """A user-facing error: `file:line:col: error: message`, a source line, a caret."""

    def __init__(self, message: str, position: Position | None = None):
        self.message = message
        self.position = position
        super().__init__(self.render())

    def render(self) -> str:
        if self.position is None:
            return f"error: {self.message}"
        text = f"{self.position}: error: {self.message}"
        src = self.position.source_line
        if src is not None:
            text += f"\n{src.rstrip()}\n{' ' * (self.position.column - 1)}^"
        return text


def position_of(loc: Attribute, sources: dict[str, list[str]] | None = None) -> Position | None:
    """The file position inside a location attribute, if it has one."""
    if isinstance(loc, FileLineColLoc):
        file, line, col = loc.filename.data, loc.line.data, loc.column.data
        src = None
        if sources and file in sources and 0 < line <= len(sources[file]):
            src = sources[file][line - 1]
        return Position(file, line, col, src)
    if isinstance(loc, NameLoc):
        return position_of(loc.location, sources)
    if isinstance(loc, FusedLoc):
        for inner in loc.locations:
            found = position_of(inner, sources)
            if found is not None:
                return found
    return None
