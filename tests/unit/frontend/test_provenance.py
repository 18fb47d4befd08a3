"""Each recorded op's location names the user's line: file (relative to the working
directory when below it), line and column, module path and direction; equal
provenances share one location attribute (the recorder keeps what it derives per code
object, file and provenance)."""

from __future__ import annotations

import os
from contextlib import chdir
from pathlib import Path

import numpy as np

import gradfuse
from gradfuse import Feeder
from gradfuse.dialects import tg
from gradfuse.frontend.recorder import program
from gradfuse.provenance import Provenance, provenance_of

HERE = Path(__file__).resolve()


def recorded(kind: type) -> list[Provenance]:
    """The provenance of each op of `kind` recorded so far, in program order."""
    return [provenance_of(op.location) for op in program().module.walk() if isinstance(op, kind)]


def twice() -> None:
    x = Feeder(lambda: np.ones(3, np.float32), shape=[3])
    y = x + x
    _ = y * (y + y)  # noqa: F841 (columns 9 and 14 of this line)


def test_ops_name_their_line_and_column() -> None:
    gradfuse.reset()
    with chdir(HERE.parent):
        twice()
        twice()
    first = twice.__code__.co_firstlineno
    adds = recorded(tg.AddOp)
    assert [(p.file, p.line - first, p.column) for p in adds] == [
        (HERE.name, 2, 9), (HERE.name, 3, 14)
    ] * 2  # fmt: skip
    assert [(p.line - first, p.column) for p in recorded(tg.MulOp)] == [(3, 9)] * 2
    gradfuse.reset()


def test_the_file_is_relative_to_the_working_directory_at_the_time() -> None:
    gradfuse.reset()
    with chdir(HERE.parents[1]):
        twice()
    with chdir(HERE.parents[3] / "examples"):  # not below it: the absolute path
        twice()
    with chdir(HERE.parent):
        twice()
    files = [p.file for p in recorded(tg.MulOp)]
    assert files == [os.path.join("frontend", HERE.name), str(HERE), HERE.name]
    gradfuse.reset()


def test_equal_provenances_share_one_location_that_reads_back() -> None:
    prov = Provenance("model.py", 12, 5, "encoder.layers.1.linear1", "backward")
    same = Provenance("model.py", 12, 5, "encoder.layers.1.linear1", "backward")
    assert prov.to_location() is same.to_location()
    assert provenance_of(prov.to_location()) == prov
    other = Provenance("model.py", 12, 6, "encoder.layers.1.linear1", "backward")
    assert provenance_of(other.to_location()) == other != prov
