"""The C backend against the reference interpreter, and every generated CUDA source
through nvcc (`nvcc -cubin -arch=sm_90`, skipped when nvcc is not on PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from compiled import agree, needs_nvcc, nvcc_errors  # tests/unit
from hypothesis import given, settings

from gradfuse.backend import compile_module, cuda_available
from gradfuse.backend.c import compile_c
from gradfuse.backend.c.host import render_c
from gradfuse.backend.cstyle import CUDATarget, render_kernels
from gradfuse.diagnostics import GradfuseError
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "passes"))
from fusion_programs import programs  # noqa: E402

PROGRAMS = {
    "mlp": (ROOT / "tests/filecheck/passes/tg-fuse.tg").read_text().replace("0 to 1000", "0 to 7"),
    "linreg": (ROOT / "examples/linreg.tg").read_text(),
    "sparse": """
func @main(%x: tensor<5x3xf32>, %i: tensor<4x3xf32>, %c: tensor<f32>) -> (tensor<4x3xf32>, tensor<5x3xf32>, tensor<2x3xf32>, tensor<5x3xf32>) {
  %g = tg.gather %x, %i dim=0 : tensor<4x3xf32>
  %s = tg.scatter_add %i, %g dim=0 : tensor<5x3xf32>
  %r = tg.random %c seed=7 : tensor<2x3xf32>
  %e = tg.erf %x : tensor<5x3xf32>
  return %g, %s, %r, %e
}
""",
    "masks": """
func @main(%x: tensor<2x5xf32>) -> (tensor<2x7xf32>) {
  %z = tg.constant 0.0 : tensor<2x5xf32>
  %m = tg.cmplt %z, %x : tensor<2x5xi1>
  %mp = tg.pad %m low=[0, 1] high=[0, 1] value=0.0 : tensor<2x7xi1>
  %t = tg.constant 1.0 : tensor<2x5xi1>
  %tp = tg.pad %t low=[0, 2] high=[0, 0] value=0.0 : tensor<2x7xi1>
  %xp = tg.pad %x low=[0, 1] high=[0, 1] value=0.0 : tensor<2x7xf32>
  %f = tg.constant 5.0 : tensor<2x7xf32>
  %a = tg.where %mp, %xp, %f : tensor<2x7xf32>
  %g = tg.constant -1.0 : tensor<2x7xf32>
  %b = tg.where %tp, %a, %g : tensor<2x7xf32>
  return %b
}
""",
    "conv": """
func @main(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x4x4xf32>) -> (tensor<2x4x4x4xf32>) {
  %y = tg.conv2d %x, %w stride=[2, 2] padding=[1, 1] dilation=[1, 1] groups=1 : tensor<2x4x4x4xf32>
  %s = tg.constant 0.2 : tensor<2x4x4x4xf32>
  %ys = tg.mul %y, %s : tensor<2x4x4x4xf32>
  %a = tg.max %y, %ys : tensor<2x4x4x4xf32>
  return %a
}
""",
}


def inputs(name: str):
    rng = np.random.default_rng(1)
    if name == "mlp":
        return {"feeders": {"x": rng.standard_normal((7, 2, 8)).astype(np.float32)}}
    if name == "linreg":
        return {"feeders": dict(np.load(ROOT / "examples/linreg.npz"))}
    if name == "masks":  # masks read through zero padding: false outside
        return {"args": [np.array([[1, -2, 3, -4, 5], [0, 2, -1, 1, 0]], np.float32)]}
    if name == "sparse":
        idx = np.array([[0, 1, 2], [4, 4, 4], [1, 1, 1], [0, 0, 3]], np.float32)
        return {"args": [rng.standard_normal((5, 3)).astype(np.float32), idx, np.float32(3)]}
    return {
        "args": [
            rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
            rng.standard_normal((4, 3, 4, 4)).astype(np.float32),
        ]
    }


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_c_backend_matches_the_reference(name):
    agree(PROGRAMS[name], "c", **inputs(name))


def test_masks_read_through_padding_on_the_cpu_pipeline():
    """A computed mask and a constant one (a global of `true`s) read through zero padding:
    false outside, on the loop pipeline too (both used to stop gcc's build with an
    internal error: a float 0 for an i1)."""
    agree(PROGRAMS["masks"], "c", pipeline="cpu", **inputs("masks"))


@settings(max_examples=15, deadline=None)
@given(programs())
def test_random_programs_match_the_reference(src: str):
    agree(src, "c", feeders=random_feeders(src))


def random_feeders(src: str) -> dict[str, np.ndarray]:
    """Eight steps of inputs for a random program's feeder "x", of its shape."""
    line = next(ln for ln in src.splitlines() if "tg.feeder" in ln)
    shape = tuple(int(d) for d in line.split("tensor<")[1].split("xf32")[0].split("x"))
    return {"x": np.random.default_rng(2).standard_normal((8, *shape)).astype(np.float32) * 0.5}


def test_a_failing_feeder_stops_the_run_with_its_name():
    calls = []

    def feeder():
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("out of data")
        return np.ones((2, 8), np.float32)

    with pytest.raises(
        GradfuseError, match=r'feeder "x" \(call 2\): raised ValueError: out of data'
    ):
        compile_module(parse_tg(PROGRAMS["mlp"]), "c").run(feeders={"x": feeder})


@needs_nvcc
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_cuda_source_compiles_with_nvcc(name):
    module = parse_tg(PROGRAMS[name])
    run_pipeline(module, "cuda")  # what the CUDA backend compiles
    assert nvcc_errors(render_kernels(module, CUDATarget())) is None


def test_a_kernel_that_fails_to_compile_is_named_with_its_provenance(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    module = parse_tg(PROGRAMS["linreg"])
    run_pipeline(module, "cpu")
    from gradfuse.backend.c import host

    real = host.render_program

    def broken(m, profile=False):
        rendered = real(m, profile)
        rendered.source = rendered.source.replace(
            "static void k1(", "static void k1(no_such_type q, ", 1
        )
        return rendered

    monkeypatch.setattr("gradfuse.backend.c.render_program", broken)
    with pytest.raises(GradfuseError) as info:
        compile_module(module, "c", pipeline="")
    message = str(info.value)
    assert "gcc failed on kernel k1 (fused from <string>:11 (forward))" in message
    assert "no_such_type" in message and "-failed.c" in message
    kept = Path(message.rsplit("source: ", 1)[1].splitlines()[0])
    assert kept.exists() and "no_such_type" in kept.read_text()
    assert not list(tmp_path.glob("c/*.so"))  # no cache entry for a failed build


def test_gpu_grids_are_refused_by_the_c_target_at_their_first_kernel():
    """The c target prints the `cpu` pipeline's loop nests; IR of GPU grids (`default`,
    `cuda`) is one error naming the pipeline to run, at the first kernel's source."""
    module = parse_tg(PROGRAMS["linreg"])
    run_pipeline(module, "default")
    with pytest.raises(GradfuseError, match=r"lower with the cpu pipeline \(-p cpu\)") as info:
        render_c(module)
    assert info.value.position is not None and info.value.position.line == 7


def test_a_missing_compiler_is_one_sentence(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    module = parse_tg(PROGRAMS["linreg"])
    with pytest.raises(GradfuseError, match="needs a C compiler and 'no-such-cc' is not found"):
        compile_module(module, "c")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_nvcc_failing_names_the_kernel(monkeypatch, tmp_path):
    from gradfuse.backend.cuda.compiler import compile_cubin, cuda_source

    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    module = parse_tg(PROGRAMS["linreg"])
    run_pipeline(module, "default")
    source = cuda_source(module).replace("void k1(", "void k1(no_such_type q, ", 1)
    with pytest.raises(GradfuseError, match=r"nvcc failed on kernel k1 \(fused from <string>:11"):
        compile_cubin(source, "sm_90", module)
    assert not list(tmp_path.glob("cuda/*.cubin"))


@pytest.mark.skipif(cuda_available(), reason="PyCUDA sees a GPU here")
def test_the_cuda_backend_without_pycuda_or_a_gpu_is_one_sentence():
    module = parse_tg(PROGRAMS["linreg"])
    with pytest.raises(GradfuseError, match="the cuda backend needs (PyCUDA|an NVIDIA GPU)") as err:
        compile_module(module, "cuda")
    assert str(err.value).endswith('backend="cuda-emu" runs the same CUDA on this CPU')


DAMAGES = {
    "foreign": lambda data: b"half a library",  # a torn write or a foreign file
    "truncated": lambda data: data[: len(data) // 2],  # ELF header intact: SIGBUS once loaded
    "zeroed": lambda data: data[:4] + bytes(len(data) - 4),  # ELF magic, then zeros: OSError
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_corrupt_cache_entry_is_rebuilt_never_loaded(monkeypatch, tmp_path, damage):
    import ctypes

    from gradfuse.backend.c import cache

    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    source = f"int gradfuse_answer_{damage}(void) {{ return 42; }}\n"  # a path never loaded
    path = cache.build_library(source)
    good = path.read_bytes()
    assert good[:4] == b"\x7fELF" and path.with_name(path.name + ".sha256").exists()
    path.write_bytes(DAMAGES[damage](good))
    again = cache.build_library(source)
    assert again == path and again.read_bytes()[:4] == b"\x7fELF"
    assert len(again.read_bytes()) == len(good)  # rebuilt whole
    assert getattr(ctypes.CDLL(str(again)), f"gradfuse_answer_{damage}")() == 42


def test_a_cache_path_that_is_a_file_is_one_sentence(monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file")
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(blocker))
    with pytest.raises(GradfuseError, match="the cache directory .* cannot be created") as info:
        compile_module(parse_tg(PROGRAMS["linreg"]), "c")
    assert "GRADFUSE_CACHE_DIR" in str(info.value) and "\n" not in str(info.value)


def test_two_processes_building_the_same_library_at_once_both_succeed(tmp_path):
    script = (
        "import sys; from gradfuse.backend.c.cache import build_library; "
        "print(build_library('int f(void) { return 7; }\\n'))"
    )
    env = {**os.environ, "GRADFUSE_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(4)
    ]
    outs = [p.communicate()[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1 and Path(outs[0]).read_bytes()[:4] == b"\x7fELF"
    assert not [p for p in (tmp_path / "c").iterdir() if p.is_dir()]  # no temporary left


LANE_SHAPES = """
func @main(%x: tensor<15x20xf32>, %w: tensor<20x37xf32>, %h: tensor<3x4x5x6xf32>, %v: tensor<37x24xf32>) -> (tensor<15x37xf32>, tensor<15x37xf32>) {
  %y = tg.dot %x, %w : tensor<15x37xf32>
  %z = tg.constant 0.0 : tensor<15x37xf32>
  %r = tg.max %y, %z : tensor<15x37xf32>
  %hp = tg.permute %h perm=[0, 2, 1, 3] : tensor<3x5x4x6xf32>
  %hr = tg.reshape %hp : tensor<15x24xf32>
  %vt = tg.permute %v perm=[1, 0] : tensor<24x37xf32>
  %u = tg.dot %hr, %vt : tensor<15x37xf32>
  return %r, %u
}
"""


def test_register_blocked_and_split_reductions_match_the_reference():
    rng = np.random.default_rng(4)
    args = [
        rng.standard_normal(s).astype(np.float32)
        for s in [(15, 20), (20, 37), (3, 4, 5, 6), (37, 24)]
    ]
    agree(LANE_SHAPES, "c", args=args)
    module = parse_tg(LANE_SHAPES)
    run_pipeline(module, "cpu")
    from gradfuse.backend.c.host import render_c

    source = render_c(module)
    # 37 points a row: four vectors of 8 lanes and a scalar remainder
    assert "d1 < 32; d1 += 8)" in source and "d1 = 32; d1 < 37; d1++)" in source
    assert "d3 < 4; d3++)" in source and "d4 < 6; d4++)" in source  # the 4x6 reduction


@needs_nvcc
@settings(max_examples=5, deadline=None)
@given(programs())
def test_the_cuda_source_of_random_programs_compiles(src: str):
    module = parse_tg(src)
    run_pipeline(module, "cuda")  # what the CUDA backend compiles
    assert nvcc_errors(render_kernels(module, CUDATarget())) is None


TWO_FUNCTIONS = """
func @main(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = tg.add %x, %x : tensor<2xf32>
  return %y
}
func @other(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = tg.neg %x : tensor<2xf32>
  return %y
}
"""


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_a_run_reuses_the_last_runs_arena_and_reads_nothing_it_left(name):
    """The arena of temporaries is kept from one run to the next (no page faults on a
    fresh one); a run writes every temporary before it reads it, as on the GPU, whose
    memory starts as garbage: with the kept arena poisoned (NaN bytes), a run gives the
    same numbers, bit for bit."""
    module = parse_tg(PROGRAMS[name])
    run_pipeline(module, "cpu")
    program = compile_c(module)
    first = program.run(**inputs(name)).results
    (arena,) = program.arenas
    arena[:] = 0xFF  # every float in it a NaN
    again = program.run(**inputs(name)).results
    assert program.arenas == [arena]  # the same arena, back for the next run
    for a, b in zip(again, first, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_entry_other_than_the_compiled_one_is_refused_not_ignored():
    program = compile_module(parse_tg(TWO_FUNCTIONS), "c")
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(program.run(args=[x]).results[0], 2 * x)
    with pytest.raises(GradfuseError, match="the c backend compiled @main, not @other"):
        program.run(args=[x], entry="other")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_cubin_cache_entry_is_rebuilt(damage, monkeypatch, tmp_path):
    """The cuda backend's cubins are checksummed as the c backend's libraries are."""
    from gradfuse.backend.cuda.compiler import compile_cubin, cuda_source

    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    module = parse_tg(PROGRAMS["linreg"])
    run_pipeline(module, "default")
    source = cuda_source(module)
    first = compile_cubin(source, "sm_90", module)
    (entry,) = tmp_path.glob("cuda/*.cubin")
    entry.write_bytes(DAMAGES[damage](first))
    assert compile_cubin(source, "sm_90", module) == first  # rebuilt: nvcc is deterministic
    assert entry.read_bytes() == first


MATH = """
func @main(%x: tensor<Nxf32>, %y: tensor<Nxf32>) -> (tensor<Nxf32>, tensor<Nxf32>) {
  %e = tg.exp2 %x : tensor<Nxf32>
  %m = tg.max %x, %y : tensor<Nxf32>
  return %e, %m
}
"""


def test_exp2_and_max_as_libm_gives_them():
    """The c backend's exp2f and fmaxf are its own (gcc vectorises them; libm's are a
    call per element): exp2 within 1.5 ulp of the exact value, as its docstring argues
    (0.87 ulp with FMA, 1.06 without, over every float in [-160, 130]), and libm's
    results at NaN, the infinities, overflow, underflow and subnormals; max as fmaxf
    (a NaN operand gives the other)."""
    rng = np.random.default_rng(7)
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 128.0, 127.99, -126.0, -149.0, -149.5, -150.0, -200.0, 1e9, -1e9]  # fmt: skip
    x = np.concatenate([special, rng.uniform(-160, 130, 20000), rng.uniform(-2, 2, 20000)])
    x = x.astype(np.float32)
    y = rng.uniform(-2, 2, x.size).astype(np.float32)
    y[:3] = np.nan  # max(nan, nan), max(inf, nan), max(-inf, nan)
    y[5] = np.nan
    src = MATH.replace("N", str(x.size))
    lowered = parse_tg(src)
    run_pipeline(lowered, "cpu")
    assert "gf_exp2f(" in render_c(lowered) and "gf_fmaxf(" in render_c(lowered)
    e, m = compile_module(parse_tg(src), "c").run(args=[x, y]).results
    exact = np.exp2(x.astype(np.float64))
    want = exact.astype(np.float32)
    finite = np.isfinite(want) & (want != 0)
    ulp = np.spacing(np.abs(want[finite]))
    assert np.max(np.abs(e[finite] - exact[finite]) / ulp) <= 1.5
    np.testing.assert_array_equal(e[~finite], want[~finite])  # nan, inf, 0 exactly
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(m, np.fmax(x, y))


def test_the_c_is_built_at_O2(monkeypatch, tmp_path):
    """The `cpu` pipeline's C is vectorised and unrolled by its loop passes: gcc -O2 (-O3
    took 45% longer on DCGAN for the same step time)."""
    monkeypatch.setenv("GRADFUSE_CACHE_DIR", str(tmp_path))
    commands: list[list[str]] = []
    popen = subprocess.Popen

    def spy(cmd, *args, **kwargs):  # records gcc's builds (not `--version`), then runs it
        commands.extend([cmd] if "-fopenmp" in cmd else [])
        return popen(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    compile_module(parse_tg(PROGRAMS["linreg"]), "c")
    assert commands and all(cmd[1] == "-O2" for cmd in commands)
