"""The widest vectors that pay on this machine, and the register blocks its register
file holds: the `lanes` the c backend asks of `loops-vectorize`, measured once per CPU,
compiler and flags and cached on disk, and the `jam-rows` of `loops-unroll-jam`.

AVX-512 is not the same everywhere: Intel's server cores have two 512-bit FMA units,
Zen 4 runs a 512-bit op as two 256-bit halves, and a CPU without it splits a 16-lane
GCC vector into two. So gcc compiles a probe with the c backend's own flags: 12
independent chains of FMAs on vectors of 8 lanes, then of 16; 16 lanes are chosen when
they do at least 4/3 of the work per second of 8 (about 2x on a Sapphire Rapids, 1x on
Zen 4 or on AVX2).

A register block of `loops-unroll-jam` keeps rows x 2 vectors of sums in registers.
How many vector registers the target has is no measurement but the instruction set gcc
builds for: 32 with AVX-512 (and on AArch64), 16 with AVX2 or SSE. Blocks of 8 rows
(16 sums) fit 32; on 16 they spill, and 4 rows (8 sums, 2 loads and a broadcast) fit.
On the 2-core Zen 3 developer machine (AVX2, one thread, DCGAN b8's step): 8 rows 541 /
569 ms, 6 rows 612 / 684, 4 rows 437 / 450, 3 rows 676, 2 rows 614; on AVX-512 machines
8 rows were the faster (`loops_unroll_jam.ROWS`). (With `cache.SCHEDULE` keeping the
weights in registers, ResNet-18 b8's step took 182 ms at 6 rows, 142 at 4: 6 rows leave
remainder nests of 16-wide images.) Where a short dim leaves a block (3 taps), 16
registers fill it up to 6 rows by exact divisors of the next dim (`FILL`).

Those 2 vectors a row need the lanes' dim to hold 2 vectors: `loops-pack` runs a
convolution's output channels in tiles of 16, one vector of 16 lanes, unless its
`pack-tile` asks for 2 x 16 (its long reductions, `loops_pack.LONG_REDUCTION`):

    host_lanes()               # 16 or 8
    host_rows()                # 8 or 4
    host_fill()                # 8 or 6
    c_pipeline("cpu")          # "cpu{lanes=16 jam-rows=8 jam-fill=8 pack-tile=32}"
    c_pipeline("cpu{lanes=8}") # "cpu{lanes=8 jam-rows=4 jam-fill=6 pack-tile=16}": an explicit choice is kept
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
from functools import cache
from pathlib import Path

from gradfuse.backend.c.cache import build_library, compiler, flags
from gradfuse.backend.disk_cache import cache_dir, store, verified
from gradfuse.passes.loops.pack_copy import TILE

CHAINS = "".join(f"  a{k} = a{k} * m + c;\n" for k in range(12))
PROBE = "#include <time.h>\nvolatile float gf_sink;\n" + "".join(
    f"""typedef float gf_floatx{w} __attribute__((vector_size({4 * w})));
long long gf_probe{w}(long n, float s) {{
  gf_floatx{w} m = (gf_floatx{w}){{}} + s, c = m * 0.5f;
  {"".join(f"gf_floatx{w} a{k} = m + {k}.0f; " for k in range(12))}
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {{
{CHAINS}  }}
  clock_gettime(CLOCK_MONOTONIC, &t1);
  gf_floatx{w} all = {" + ".join(f"a{k}" for k in range(12))};
  for (int l = 0; l < {w}; l++) gf_sink += all[l];
  return (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
}}
"""
    for w in (8, 16)
)
"""The probe: `gf_probe8(n, s)` and `gf_probe16(n, s)`, each the nanoseconds of `n`
steps of 12 vector FMA chains (`s` near 1 keeps the values normal)."""

STEPS = 400_000  # about 1-2 ms a run: 4.8M vector FMAs
GAIN = 4 / 3
"""How much more work per second 16 lanes must do than 8 to be chosen (noise: the
best of 5 runs of each, taking turns)."""


def measure() -> tuple[int, int]:
    """The best nanoseconds of the probe's 8-lane run and of its 16-lane run."""
    lib = ctypes.CDLL(str(build_library(PROBE)))
    runs = {}
    for w in (8, 16):
        fn = getattr(lib, f"gf_probe{w}")
        fn.argtypes, fn.restype = [ctypes.c_long, ctypes.c_float], ctypes.c_longlong
        runs[w] = fn
    best = {8: 1 << 62, 16: 1 << 62}
    for _ in range(5):
        for w, fn in runs.items():
            best[w] = min(best[w], fn(STEPS, 0.999))
    return best[8], best[16]


def choose(ns8: int, ns16: int) -> int:
    """16 where 16 lanes do at least `GAIN` times the work of 8 per second, else 8."""
    return 16 if 2 * ns8 >= GAIN * ns16 else 8


def _record(library: Path) -> Path:
    """Where the choice for the probe `library` (keyed by source, flags and compiler)
    on this CPU is kept."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    key = hashlib.sha256(f"{library.name}\0{cpu}".encode()).hexdigest()[:32]
    return cache_dir("c") / f"lanes-{key}.txt"


def host_lanes() -> int:
    """The widest vectors, in floats, for the machine and the c backend's flags
    ($GRADFUSE_CFLAGS included): measured once, then read from the cache."""
    return _lanes(flags())


@cache
def _lanes(cflags: tuple[str, ...]) -> int:
    record = _record(build_library(PROBE))
    if verified(record):
        return int(record.read_text())
    lanes = choose(*measure())
    store(record, f"{lanes}\n".encode())
    return lanes


@cache
def vector_registers(cflags: tuple[str, ...]) -> int:
    """The vector registers of the instruction set gcc builds for with `cflags` (its
    predefined macros, asked once per set of flags): 32 with AVX-512 or on AArch64, else
    16 (also where gcc refuses the flags: the build then fails with gcc's own message)."""
    macros = subprocess.run(
        [compiler(), *cflags, "-dM", "-E", "-x", "c", os.devnull],
        capture_output=True,
        text=True,
    ).stdout
    return 32 if "__AVX512F__" in macros or "__aarch64__" in macros else 16


def host_rows() -> int:
    """The rows of `loops-unroll-jam`'s register blocks for the c backend's flags: a
    quarter of the vector registers (8 with 32, 4 with 16)."""
    return _rows(flags())


def _rows(cflags: tuple[str, ...]) -> int:
    return vector_registers(cflags) // 4


FILL = 6
"""The rows that a block of 16 registers is filled up to where a short dim leaves it
(`loops-unroll-jam`'s `fill`: a 3 x 3 window's 3 taps x 2 input channels): 12 sums, 2
vectors of weights and a broadcast, 15 registers. ResNet-18 b8's weight gradients, one
thread, 2-core Zen 3: 42.5 -> 35.8 ms a step (kernels timed by `gradfuse.profiler`, the
best of 2 runs), the step 135-137 -> 127 ms. With 32 registers the block stays within
`host_rows()` (3 taps x 2 channels of 8 rows), as measured there."""


def host_fill() -> int:
    """`loops-unroll-jam`'s `fill` for the c backend's flags: `FILL` with 16 vector
    registers, else `host_rows()`."""
    return _fill(flags())


def _fill(cflags: tuple[str, ...]) -> int:
    return FILL if vector_registers(cflags) == 16 else _rows(cflags)


def c_pipeline(spec: str) -> str:
    """`spec` (a pipeline of the c backend, `cpu` or `cpu{jam-work=0}`) with this
    machine's `lanes`, `jam-rows` and `jam-fill` (where it chooses no `jam-rows`), and a
    `pack-tile` of 2 vectors of those lanes (at least `TILE`), unless it chooses them."""
    name, _, options = spec.partition("{")
    words = options.rstrip("}").split()
    chosen = dict(w.partition("=")[::2] for w in words)
    lanes = int(chosen.get("lanes") or host_lanes())
    if "lanes" not in chosen:
        words.append(f"lanes={lanes}")
    if "jam-rows" not in chosen:
        words.append(f"jam-rows={host_rows()}")
        if "jam-fill" not in chosen:
            words.append(f"jam-fill={host_fill()}")
    if "pack-tile" not in chosen:
        words.append(f"pack-tile={max(TILE, 2 * lanes)}")
    return f"{name}{{{' '.join(words)}}}"
