"""The emulated CUDA device (`gradfuse.backend.cuda.emu`) on hand-written CUDA: shared
memory and barriers, poisoned memory, a barrier that not every thread reaches, stream
order and asynchronous copies, events, graph capture and replay, sticky errors, and the
threads mode, and ThreadSanitizer on it (`make test-slow`). The generated programs run on
it in tests/gpu.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from gradfuse.backend.cuda.compiler import cuda_source
from gradfuse.backend.cuda.emu import EmuDevice, EmuError
from gradfuse.backend.cuda.emu.build import build_emulated
from gradfuse.backend.cuda.emu.device import EmuModule
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

SOURCE = """#include <stdint.h>
extern "C" __global__ void block_sums(float* __restrict__ x, float* __restrict__ out) {
  __shared__ float part[256];
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  part[threadIdx.x] = x[i];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

extern "C" __global__ void atomic_total(float* __restrict__ x, float* out) {
  atomicAdd(out, x[(long)blockIdx.x * blockDim.x + threadIdx.x]);
}

extern "C" __global__ void copy(float* __restrict__ x, float* __restrict__ y) {
  y[threadIdx.x] = x[threadIdx.x];
}

extern "C" __global__ void copy_int(int32_t* __restrict__ x, int32_t* __restrict__ y) {
  y[threadIdx.x] = x[threadIdx.x];
}

extern "C" __global__ void add_one(float* __restrict__ x) { x[threadIdx.x] += 1.0f; }

extern "C" __global__ void diverging(float* __restrict__ x) {
  if (threadIdx.x < 3) __syncthreads();
  x[threadIdx.x] = 0.0f;
}
"""

RNG = np.random.default_rng(0)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def device() -> EmuDevice:
    return EmuDevice("fibers", workers=2)


@pytest.fixture(scope="module")
def kernels(device: EmuDevice):
    return device.load(SOURCE, None)


def upload(device: EmuDevice, host: np.ndarray):
    buf = device.alloc(host.nbytes, "test")
    device.htod(int(buf), host)
    return buf


def download(device: EmuDevice, buf, shape, dtype=np.float32) -> np.ndarray:
    host = np.empty(shape, dtype)
    device.dtoh(host, int(buf))
    return host


def test_block_reductions_through_shared_memory_and_barriers(device, kernels):
    x = RNG.standard_normal(4 * 256).astype(np.float32)
    xb, out = upload(device, x), device.alloc(16, "out")
    stream = device.stream()
    kernels.function("block_sums", 2).launch((4, 1), (256, 1, 1), stream, [int(xb), int(out)])
    stream.synchronize()
    got = download(device, out, (4,))
    np.testing.assert_allclose(got, x.reshape(4, 256).astype(np.float64).sum(1), rtol=1e-5)


COLUMN_SUMS = """func @main(%x: tensor<520x8xf32>) -> (tensor<8xf32>) {
  %s = tg.reduce_sum %x dims=[0] : tensor<8xf32>
  return %s
}
"""


def test_a_freshly_loaded_library_s_first_launch_on_several_os_threads(device, tmp_path):
    """The cuda pipeline's column sums (a block per column: 256 partial sums, then a tree
    in a `__shared__` array) on two OS threads, as the first launch of a fresh instance
    of the library each time. Built with `-mtls-dialect=gnu2` (TLS descriptors) on glibc
    2.36, a block lost a thread's partial sum in 42 of 50 loads (one OS thread: none): the
    descriptor's slow path, a thread's first touch of the array, clobbers the xmm register
    that holds the sum (glibc bug 31372, fixed in 2.40)."""
    module = parse_tg(COLUMN_SUMS)
    run_pipeline(module, "cuda")
    source = cuda_source(module)
    library = build_emulated(source, "fibers")
    x = RNG.random((520, 8), dtype=np.float32)
    want = x.astype(np.float64).sum(0)
    xb, out = upload(device, x), device.alloc(32, "out")
    for k in range(20):
        copy = tmp_path / f"copy{k}.so"  # a new path: a new instance for the dynamic linker
        shutil.copy(library, copy)
        loaded = EmuModule(source, None, "fibers", workers=2, library=copy)
        stream = device.stream()
        loaded.function("r0", 2).launch((8, 1), (256, 1, 1), stream, [int(xb), int(out)])
        stream.synchronize()
        np.testing.assert_allclose(download(device, out, (8,)), want, rtol=1e-5, err_msg=str(k))


def test_float_atomics_from_blocks_on_several_os_threads(device, kernels):
    x = np.ones(64 * 128, np.float32)
    xb, out = upload(device, x), upload(device, np.zeros(1, np.float32))
    stream = device.stream()
    kernels.function("atomic_total", 2).launch((64, 1), (128, 1, 1), stream, [int(xb), int(out)])
    stream.synchronize()
    assert download(device, out, (1,))[0] == 64 * 128  # exact: integers below 2^24


def test_unwritten_memory_reads_as_nan_and_minus_one(device, kernels):
    stream = device.stream()
    src, dst = device.alloc(32, "unwritten"), device.alloc(32, "dst")
    kernels.function("copy", 2).launch((1, 1), (8, 1, 1), stream, [int(src), int(dst)])
    stream.synchronize()
    assert np.isnan(download(device, dst, (8,))).all()
    kernels.function("copy_int", 2).launch((1, 1), (8, 1, 1), stream, [int(src), int(dst)])
    stream.synchronize()
    assert (download(device, dst, (8,), np.int32) == -1).all()


def test_a_barrier_that_not_every_thread_reaches_is_an_error_at_the_next_sync():
    device = EmuDevice("fibers", workers=1)
    kernels = device.load(SOURCE, None)
    stream, buf = device.stream(), device.alloc(32, "x")
    after = upload(device, np.zeros(1, np.float32))
    kernels.function("diverging", 1).launch((2, 1), (8, 1, 1), stream, [int(buf)])
    device.htod_async(int(after), np.ones(1, np.float32), stream)
    with pytest.raises(EmuError, match=r"kernel diverging failed: __syncthreads\(\) not reached"):
        stream.synchronize()
    with pytest.raises(EmuError, match="block \\(0, 0, 0\\)"):  # sticky, as a CUDA error
        download(device, after, (1,))  # a synchronous copy waits for the streams
    host = np.empty(1, np.float32)
    device.streams.discard(stream)
    device.dtoh(host, int(after))
    assert host[0] == 0  # the copy queued after the failed kernel never ran


def test_streams_run_later_in_order_and_events_mark_their_progress(device, kernels):
    stream, gate = device.stream(), threading.Event()
    stream.put(gate.wait)  # holds the stream, as a long kernel would
    host = np.zeros(8, np.float32)
    buf = device.alloc(32, "x")
    device.htod_async(int(buf), host, stream)
    kernels.function("add_one", 1).launch((1, 1), (8, 1, 1), stream, [int(buf)])
    done = device.event().record(stream)
    host[:] = 5  # the copy has not run yet: it reads the host buffer when it does
    assert not done.query()
    gate.set()
    done.synchronize()
    assert done.query()
    out = np.empty(8, np.float32)
    device.dtoh_async(out, int(buf), stream)
    stream.synchronize()
    np.testing.assert_array_equal(out, 6)


def test_a_captured_graph_runs_only_when_launched_and_each_time(device, kernels):
    stream = device.stream()
    buf = upload(device, np.zeros(8, np.float32))
    add = kernels.function("add_one", 1)
    with device.capture(stream) as cap:
        add.launch((1, 1), (8, 1, 1), stream, [int(buf)])
        add.launch((1, 1), (8, 1, 1), stream, [int(buf)])
    stream.synchronize()
    np.testing.assert_array_equal(download(device, buf, (8,)), 0)
    cap.graph.launch(stream)
    cap.graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(download(device, buf, (8,)), 4)


def test_the_threads_mode_computes_the_same():
    device = EmuDevice("threads")
    kernels = device.load(SOURCE, None)
    x = RNG.standard_normal(2 * 256).astype(np.float32)
    xb, out = upload(device, x), device.alloc(8, "out")
    stream = device.stream()
    kernels.function("block_sums", 2).launch((2, 1), (256, 1, 1), stream, [int(xb), int(out)])
    stream.synchronize()
    want = EmuDevice("fibers", workers=1)
    kw = want.load(SOURCE, None)
    xw, outw = upload(want, x), want.alloc(8, "out")
    s2 = want.stream()
    kw.function("block_sums", 2).launch((2, 1), (256, 1, 1), s2, [int(xw), int(outw)])
    s2.synchronize()
    np.testing.assert_array_equal(download(device, out, (2,)), download(want, outw, (2,)))


def test_an_invalid_launch_is_one_sentence(device, kernels):
    with pytest.raises(EmuError, match=r"kernel copy: invalid launch \(1, 1\) x \(2048, 1, 1\)"):
        kernels.function("copy", 2).launch((1, 1), (2048, 1, 1), device.stream(), [0, 0])
    with pytest.raises(EmuError, match="no kernel nothing"):
        kernels.function("nothing", 0)


def tsan_library() -> str | None:
    """libtsan of the C++ compiler, for LD_PRELOAD (the emulator is loaded by Python)."""
    found = subprocess.run(
        [shutil.which("g++") or "g++", "-print-file-name=libtsan.so"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return found if os.path.isabs(found) else None


def under_tsan(*argv: str) -> subprocess.CompletedProcess:
    """`python argv` on the emulated device in `tsan` mode (threads, -fsanitize=thread)."""
    library = tsan_library()
    if library is None:
        pytest.skip("g++ has no libtsan here")
    env = {
        **os.environ,
        "LD_PRELOAD": library,
        "GRADFUSE_CUDA_EMU": "tsan",
        "GRADFUSE_GPU_TESTS_ON": "cuda-emu",
        "TSAN_OPTIONS": "halt_on_error=0 exitcode=66",
    }
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800
    )


RACY = SOURCE.replace("part[threadIdx.x] = x[i];\n  __syncthreads();", "part[threadIdx.x] = x[i];")
RACE_SCRIPT = f"""
import numpy as np
from gradfuse.backend.cuda.emu import EmuDevice
device = EmuDevice()
kernels = device.load({RACY!r}, None)
x = np.ones(128, np.float32)
xb, out = device.alloc(512, "x"), device.alloc(8, "out")
device.htod(int(xb), x)
stream = device.stream()
kernels.function("block_sums", 2).launch((2, 1), (64, 1, 1), stream, [int(xb), int(out)])
stream.synchronize()
"""


@pytest.mark.slow
def test_threadsanitizer_names_the_line_of_a_missing_barrier():
    """`block_sums` without its first barrier: a thread reads its neighbour's slot of the
    shared array (line 7) that the neighbour may not have written yet (line 5)."""
    done = under_tsan("-c", RACE_SCRIPT)
    assert "WARNING: ThreadSanitizer: data race" in done.stderr, done.stderr[-3000:]
    first = done.stderr.split("WARNING: ThreadSanitizer")[1]
    assert re.search(r"#0 block_sums \S+\.cu:[57]\b", first), first
    assert "block_sums::part" in first  # the __shared__ array


@pytest.mark.slow
def test_threadsanitizer_finds_no_race_in_the_generated_programs():
    """tests/gpu's programs (linear regression, a tiled matmul and convolution, softmax
    rows, block reductions, random fused programs, the transformer's training steps) in
    threads mode under ThreadSanitizer: they pass and TSan reports nothing."""
    pytest_args = ["-q", "-p", "no:cacheprovider", "tests/gpu/test_cuda_programs.py"]
    # examples/mlp.py: 1000 steps of its two kernels, hours under TSan in threads mode
    done = under_tsan("-m", "pytest", *pytest_args, "-k", "not examples_mlp")
    assert "ThreadSanitizer" not in done.stderr, done.stderr[-5000:]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_without_a_cxx_compiler_the_emulated_device_is_one_sentence(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler")
    with pytest.raises(GradfuseError, match="needs a C\\+\\+20 compiler and 'no-such-compiler'"):
        EmuDevice().load(SOURCE + "// another source: not in the cache\n", None)
