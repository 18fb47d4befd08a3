"""Where the tests of this folder run: `GRADFUSE_GPU_TESTS_ON`, else the GPU when PyCUDA
sees one, else the emulated device (`cuda-emu`: the same CUDA text and runtime, on the
CPU). `make test` runs them on the emulated device; `make test-gpu` on the GPU
(`GRADFUSE_GPU_TESTS_ON=cuda`), where they fail rather than skip without one.

    from device_under_test import ON   # "cuda" or "cuda-emu"
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
