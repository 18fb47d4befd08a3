"""One error type for everything a user can get wrong, printed as one diagnostic.

    examples/bad.tg:3:8: error: tg.dot: inner dimensions differ: 2x255 @ 254x255
      %y = tg.dot %x, %w : tensor<2x255xf32>
           ^

Tools catch `GradfuseError`, print `str(err)` to stderr and exit with status 1:
never a Python traceback.
"""

from __future__ import annotations

import os
from collections.abc import Container
from dataclasses import dataclass, replace

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

    def with_source_line(self, input_name: str | None) -> GradfuseError:
        """This error with the offending source line, for one raised after parsing (by a
        pass), read from the input file only: never from another file a `loc(...)` names."""
        pos = self.position
        if pos is None or pos.source_line is not None or pos.file != input_name:
            return self
        if not os.path.isfile(pos.file):
            return self
        try:
            with open(pos.file, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return self
        if not 0 < pos.line <= len(lines):
            return self
        return GradfuseError(self.message, replace(pos, source_line=lines[pos.line - 1]))

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


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def quote(text: str) -> str:
    """A string as `.tg` text and diagnostics write it: in double quotes, printable
    ASCII as is, everything else escaped (`\\n`, `\\"`, `\\xHH`, `\\uHHHH`,
    `\\UHHHHHHHH`), so that a key never breaks a line and reads back exactly:

        quote('a"b\\né') == '"a\\\\"b\\\\n\\\\xe9"'
    """
    out = []
    for c in text:
        code = ord(c)
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif 0x20 <= code < 0x7F:
            out.append(c)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def unique_name(wanted: str, taken: Container[str]) -> str:
    """`wanted`, or `wanted_1`, `wanted_2`, ... whichever is not in `taken` yet (a param
    key, a symbol, a printed SSA name): `unique_name("x", {"x"}) == "x_1"`."""
    name, n = wanted, 0
    while name in taken:
        n += 1
        name = f"{wanted}_{n}"
    return name


class EscapeError(ValueError):
    """A bad escape in a quoted string: `offset` is where its backslash is."""

    def __init__(self, offset: int, message: str):
        super().__init__(message)
        self.offset = offset


def unquote(body: str) -> str:
    """The text of a quoted string's body (between the quotes), escapes decoded as
    `quote` writes them; raises `EscapeError` for an unknown or incomplete escape."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        kind = body[i + 1 : i + 2]
        if kind in _UNESCAPES:
            out.append(_UNESCAPES[kind])
            i += 2
            continue
        if kind not in _HEX_DIGITS:
            raise EscapeError(
                i,
                f"unknown escape '\\{kind}' in a string: use \\\\, \\\", \\n, \\t,"
                " \\r, \\xHH, \\uHHHH or \\UHHHHHHHH",
            )
        n = _HEX_DIGITS[kind]
        digits = body[i + 2 : i + 2 + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise EscapeError(i, f"escape '\\{kind}' needs exactly {n} hex digits")
        code = int(digits, 16)
        if 0xD800 <= code < 0xE000 or code > 0x10FFFF:
            raise EscapeError(i, f"escape '\\{kind}{digits}' is not a Unicode character")
        out.append(chr(code))
        i += 2 + n
    return "".join(out)


def decode_source(data: bytes, filename: str, line_offset: int = 0) -> str:
    """The text of a source file's bytes (UTF-8); a byte that is not UTF-8 is located."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[: err.start]
        line = before.count(b"\n") + 1
        col = err.start - (before.rfind(b"\n") + 1) + 1
        src = data.splitlines()[line - 1].decode("utf-8", errors="replace")
        raise GradfuseError(
            f"the file is not UTF-8 text: byte 0x{data[err.start]:02x} cannot start or continue a character",
            Position(filename, line + line_offset, col, src),
        ) from None
