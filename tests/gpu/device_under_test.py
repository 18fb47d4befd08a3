"""The backend that tests/gpu runs on (see conftest.py): `ON`, and `BACKEND_MARKS`, the
marks of its tests: `gpu` on a real GPU (`make test-gpu`), none on the emulated device."""

from __future__ import annotations

import os

import pytest

from gradfuse.backend import cuda_available

ON = os.environ.get("GRADFUSE_GPU_TESTS_ON") or ("cuda" if cuda_available() else "cuda-emu")
BACKEND_MARKS = [pytest.mark.gpu] if ON == "cuda" else []
