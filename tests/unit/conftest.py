"""Makes the shared test helpers next to this file importable from every test directory.

from kernel_programs import PROGRAMS, lower   # hand-written kernel-dialect programs
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
