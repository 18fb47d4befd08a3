"""The `.tg` parser's LALR tables come from the disk cache after the first build: a
loaded parser reads every `.tg` file of the repo, good and bad, exactly as a freshly
built one does, and a damaged entry is rebuilt, never loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend import parser
from gradfuse.frontend.printer import print_tg

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted(p for p in ROOT.glob("tests/**/*.tg") if "Output" not in p.parts)


def read_all() -> list[str]:
    """What the current parser makes of every chunk of every `.tg` file under tests/:
    the printed module, or the one-line diagnostic."""
    out = []
    for path in FILES:
        for chunk in path.read_text(errors="replace").split("// -----"):
            try:
                out.append(print_tg(parser.parse_tg(chunk, path.name)))
            except GradfuseError as err:
                out.append(str(err))
    return out


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    parser._lark.cache_clear()
    yield tmp_path / "lark"
    parser._lark.cache_clear()


def test_a_parser_loaded_from_the_cache_reads_every_file_as_a_built_one(fresh_cache):
    built = parser._lark()
    assert built.source_path != "<deserialized>"
    (entry,) = fresh_cache.glob("*.pickle")
    want = read_all()
    assert any("error" in w for w in want) and any("func @" in w for w in want)
    parser._lark.cache_clear()
    assert parser._lark().source_path == "<deserialized>"  # Lark's mark of a loaded parser
    assert read_all() == want


def test_a_damaged_entry_is_rebuilt_not_loaded(fresh_cache):
    parser._lark()
    (entry,) = fresh_cache.glob("*.pickle")
    entry.write_bytes(entry.read_bytes()[:1000])  # torn
    parser._lark.cache_clear()
    assert parser._lark().source_path != "<deserialized>"
    parser._lark.cache_clear()
    assert parser._lark().source_path == "<deserialized>"  # resealed by the rebuild
    assert print_tg(parser.parse_tg("func @f(%x: tensor<2xf32>) {\n  return\n}\n"))
