"""Every runner takes the keywords of the protocol in gradfuse.backend.runner: the
interpreters as `Interpreter` (with the module), the compiled programs as `Executable`."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from gradfuse.backend.c import CProgram
from gradfuse.backend.cuda.runtime import CudaProgram
from gradfuse.backend.interpreters.kernel import run_kernels
from gradfuse.backend.interpreters.lowered import run_lowered
from gradfuse.backend.interpreters.tg import run
from gradfuse.backend.runner import Executable, Interpreter


def keywords(fn: Callable, extra: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """The keyword-only parameters and their defaults (leaving out `extra`)."""
    params = inspect.signature(fn).parameters.values()
    return [
        (p.name, p.default)
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in extra
    ]


@pytest.mark.parametrize("fn", [run, run_kernels, run_lowered], ids=lambda f: f.__name__)
def test_the_interpreters_take_the_protocols_keywords(fn: Callable) -> None:
    assert keywords(fn, extra=("dtype",)) == keywords(Interpreter.__call__)
    assert list(inspect.signature(fn).parameters)[0] == "module"


@pytest.mark.parametrize("cls", [CProgram, CudaProgram], ids=lambda c: c.__name__)
def test_the_compiled_programs_take_the_protocols_keywords(cls: type) -> None:
    assert keywords(cls.run) == keywords(Executable.run)


def test_the_protocols_agree() -> None:
    """Interpreters and compiled programs take the same keywords, `profile` included
    (issue 14: the reference interpreter and the c profiling build time runs)."""
    assert keywords(Interpreter.__call__) == keywords(Executable.run)
    assert [n for n, _ in keywords(Executable.run)] == [
        "args", "feeders", "receivers", "params", "entry", "check_finite", "profile"
    ]  # fmt: skip
