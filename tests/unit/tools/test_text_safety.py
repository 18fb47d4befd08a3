"""Text safety of the tools: keys round-trip exactly through print -> parse -> print,
diagnostics never print lines of a file that a `loc(...)` names, and `ir-run
--outputs` member names never climb out of the archive."""

from __future__ import annotations

import urllib.parse
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradfuse.diagnostics import GradfuseError, quote, unquote
from gradfuse.frontend.parser import parse_tg
from gradfuse.frontend.printer import print_tg
from gradfuse.tools import ir_opt, ir_run

PROGRAM = """\
func @main() -> (tensor<2xf32>) {{
  %w = tg.param {key} init=1.0 : tensor<2xf32>
  %x = tg.feeder {key} : tensor<2xf32>
  tg.receiver {key}, %x
  return %w
}}
"""


def keys_of(text: str) -> list[str]:
    module = parse_tg(text, "k.tg")
    return [op.key.data for op in module.walk() if "key" in op.properties]


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=12))
def test_any_key_round_trips_exactly(key: str) -> None:
    printed = print_tg(parse_tg(PROGRAM.format(key=quote(key)), "k.tg"))
    assert keys_of(printed) == [key] * 3
    assert print_tg(parse_tg(printed, "k.tg")) == printed
    assert printed.count("\n") == PROGRAM.count("\n")  # no key breaks a line


@pytest.mark.parametrize(
    ("written", "key"),
    [('"caf\u00e9"', "caf\u00e9"), ('"a\\nb"', "a\nb"), ('"\\u00e9\\x00"', "\u00e9\x00"),
     ('"\\"q\\""', '"q"'), ('"\\U0001F600"', "\U0001f600")],
)  # fmt: skip
def test_escapes_and_utf8_are_decoded(written: str, key: str) -> None:
    assert keys_of(PROGRAM.format(key=written)) == [key] * 3
    printed = print_tg(parse_tg(PROGRAM.format(key=written), "k.tg"))
    assert printed.isascii() and keys_of(printed) == [key] * 3


def test_a_bad_escape_is_located_at_its_backslash() -> None:
    with pytest.raises(GradfuseError) as info:
        parse_tg(PROGRAM.format(key='"ab\\u12"'), "k.tg")
    assert str(info.value).startswith("k.tg:2:20: error: escape '\\u' needs exactly 4 hex digits")
    assert unquote(quote("x\\y\u2028")[1:-1]) == "x\\y\u2028"


FOREIGN = """\
func @main(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %w = tg.param "w" init=1.0 : tensor<2xf32> loc("/etc/passwd":1:1)
  tg.for %i = 0 to 2 step 1 {
    %a = tg.mul %x, %w : tensor<2xf32>
    tg.assign "w", %a
    tg.yield
  }
  %f = tg.feeder "f" : tensor<2xf32> loc("/etc/passwd":2:1)
  return %f
}
"""


def test_a_loc_naming_another_file_never_prints_its_lines(tmp_path: Path, capsys) -> None:
    src = tmp_path / "foreign.tg"
    src.write_text(FOREIGN)
    assert ir_opt.main([str(src), "-p", "kernels"]) == 1
    err = capsys.readouterr().err
    assert err.startswith('/etc/passwd:1:1: error: tg-fuse: param "w" is read before a loop')
    assert err.count("\n") == 1  # the diagnostic alone: no source line, no caret
    np.savez(tmp_path / "in.npz", arg0=np.ones(2, np.float32))
    argv = [str(src), "--backend", "reference", "--inputs", str(tmp_path / "in.npz")]
    assert ir_run.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith('/etc/passwd:2:1: error: feeder "f" (call 0): no data given')
    assert err.count("\n") == 1


def test_output_member_names_stay_inside_the_archive(tmp_path: Path, capsys) -> None:
    src = tmp_path / "keys.tg"
    keys = ["../../up", "/abs", "nul\x00x", "a\\b", "50%", "c:d", "caf\u00e9 ok"]
    body = "".join(f"  tg.receiver {quote(k)}, %x\n" for k in keys)
    src.write_text(f"func @main(%x: tensor<2xf32>) {{\n{body}  return\n}}\n")
    np.savez(tmp_path / "in.npz", arg0=np.ones(2, np.float32))
    out = tmp_path / "out.npz"
    argv = [str(src), "--backend", "reference", "--inputs", str(tmp_path / "in.npz")]
    assert ir_run.main([*argv, "--outputs", str(out)]) == 0, capsys.readouterr().err
    members = zipfile.ZipFile(out).namelist()
    assert all("/" not in m and "\\" not in m and "\x00" not in m for m in members)
    names = sorted(urllib.parse.unquote(m.removesuffix(".npy")) for m in members)
    assert names == sorted(f"{k}.0.0" for k in keys)
    assert ir_run.member_name("../x") == "..%2Fx"
