"""Makes the shared test helpers next to this file importable from every test directory.

from kernel_programs import PROGRAMS, lower   # hand-written kernel-dialect programs
"""

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# Test files that run the c backend and compare numbers, whatever their parameters;
# elsewhere, the cases parametrized with backend="c".
C_NUMERIC_FILES = {
    "test_c_backend.py", "test_c_conv.py", "test_c_lanes.py", "test_examples_c.py",
    "test_rows.py", "test_fused_guards_on_c.py", "test_conv_compiler_bugs.py",
    "test_random_programs.py",
}  # fmt: skip


def pytest_collection_modifyitems(items: list) -> None:
    """Marks the numeric tests of the c backend `c_numeric`: `make test` runs them a second
    time with GRADFUSE_CFLAGS set to a portable x86-64 without FMA, so that a tolerance
    that holds only with this CPU's vector width and FMA fails here, not in CI.

    A case parametrized with backend="cuda" is marked `gpu` (`make test-gpu` runs it,
    `make test` leaves it out) and skipped where no GPU is."""
    from gradfuse.backend import cuda_available  # (after the path above is set)

    gpu: bool | None = None
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec is not None else None
        if backend == "cuda":
            item.add_marker("gpu")
            gpu = cuda_available() if gpu is None else gpu
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU and PyCUDA"))
            continue
        if "cuda" in item.name:  # nvcc's builds: no GRADFUSE_CFLAGS there
            continue
        if backend == "c" or (backend is None and item.path.name in C_NUMERIC_FILES):
            item.add_marker("c_numeric")
