"""Every frontend test records into a fresh program with a fixed seed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import gradfuse


@pytest.fixture(autouse=True)
def fresh_program() -> Iterator[None]:
    """Starts each test with an empty program and `manual_seed(0)`."""
    gradfuse.reset()
    gradfuse.manual_seed(0)
    yield
    gradfuse.reset()
