"""Every example on the compiled backends: the seed program as written, examples/mlp.py
and examples/transformer.py on the c backend against the reference interpreter, and
the CUDA source of every example program through nvcc (skipped without nvcc)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from compiled import needs_nvcc, nvcc_errors  # tests/unit
from example_programs import load_example  # tests/unit (conftest puts it on the path)

import gradfuse
from gradfuse import Feeder, ir_for
from gradfuse.backend.cstyle import CUDATarget, render_kernels
from gradfuse.frontend.parser import parse_tg
from gradfuse.nn import SGD, Linear, Sequential, Sigmoid
from gradfuse.passes import run_pipeline

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "frontend"))
from test_training import numpy_seed_mlp  # noqa: E402

# ../shared/reference/autodiff_fusion_example.txt, its imports mapped to gradfuse's
SEED = """
from gradfuse import execute, ir_for, Feeder, Receiver, print_graph
from gradfuse.nn import Linear, Sequential, Sigmoid, SGD
import numpy as np
nn = Sequential( Linear(255, 255), Sigmoid(), Linear(255, 255) )
def print_inp (res):
    pass
def save_params (*args):
    print(len(args))
    for arg in args:
        print(arg)
opt = SGD(nn.parameters(), lr=0.01)
def f():
    opt.zero_grad()
    val = Feeder( lambda: np.full((2,255), 0.2, dtype=np.float32), shape=[2,255] )
    res = nn(val)
    res.backward()
    opt.step()
benchmark(lambda: ir_for(range(0, 1000), f), name="Tracking nodes")
Receiver(save_params, opt.parameters, name="saving params")
benchmark(lambda: execute(), name="full exec")
"""


def benchmark(fn, name=""):
    return fn()


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_the_seed_program_runs_as_written(backend: str, monkeypatch) -> None:
    monkeypatch.setenv("GRADFUSE_BACKEND", backend)
    gradfuse.manual_seed(5)
    scope: dict = {"benchmark": benchmark}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), np.printoptions(threshold=10):
        exec(compile(SEED, "seed.py", "exec"), scope)
    assert out.getvalue().splitlines()[0] == "4"  # save_params got the four params
    gradfuse.manual_seed(5)  # the same initial params as the seed's model
    initial = Sequential(Linear(255, 255), Sigmoid(), Linear(255, 255)).state_dict()
    gradfuse.reset()
    final = scope["nn"].state_dict()
    want = numpy_seed_mlp(initial, 1000, lr=0.01)
    for key in want:
        scale = np.abs(want[key]).max()
        np.testing.assert_allclose(final[key], want[key], rtol=1e-4, atol=1e-4 * scale)


def checksum(backend: str) -> float:
    env = {**os.environ, "GRADFUSE_BACKEND": backend}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mlp.py")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return float(re.findall(r"checksum: (\S+)", done.stdout)[-1])


def test_examples_mlp_on_c_equals_the_reference() -> None:
    assert checksum("c") == pytest.approx(checksum("reference"), rel=1e-5)


def transformer_matches_the_reference(backend: str) -> None:
    """examples/transformer.py trained 4 steps on `backend` and on the reference: the
    losses to 1e-5, the params to 1e-4 (tests/gpu runs it on cuda)."""
    example = load_example("transformer")
    runs = {}
    for name in ("reference", backend):
        gradfuse.reset()
        model, losses = example.train(steps=4, log_every=2, backend=name)
        runs[name] = (model.state_dict(), losses)
    (want, want_losses), (got, got_losses) = runs["reference"], runs[backend]
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5)
    for key in want:
        if key.endswith("in_proj_bias"):  # softmax is shift-invariant: the key bias has a
            d = want[key].shape[0] // 3  # zero gradient, where rounding noise decides
            got[key], want[key] = (
                np.delete(got[key], np.s_[d : 2 * d]),
                np.delete(want[key], np.s_[d : 2 * d]),
            )
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)


def test_examples_transformer_on_c_equals_the_reference() -> None:
    transformer_matches_the_reference("c")


def example_programs() -> dict[str, str]:
    """The .tg text of every example program (the transformer recorded for 4 steps)."""
    programs = {"linreg": (ROOT / "examples" / "linreg.tg").read_text()}
    gradfuse.reset()
    nn = Sequential(Linear(255, 255), Sigmoid(), Linear(255, 255))
    opt = SGD(nn.parameters(), lr=0.01)

    def f() -> None:
        opt.zero_grad()
        nn(Feeder(lambda: np.full((2, 255), 0.2, np.float32), shape=[2, 255])).backward()
        opt.step()

    ir_for(range(10), f)
    programs["mlp"] = gradfuse.ir_text()
    gradfuse.reset()
    load_example("transformer").record(steps=4, log_every=2)
    programs["transformer"] = gradfuse.ir_text()
    gradfuse.reset()
    return programs


@needs_nvcc
@pytest.mark.parametrize("name", ["linreg", "mlp", "transformer"])
def test_the_cuda_source_of_every_example_compiles(name: str, tmp_path: Path) -> None:
    module = parse_tg(example_programs()[name])
    run_pipeline(module, "cuda")  # what the CUDA backend compiles
    assert nvcc_errors(render_kernels(module, CUDATarget())) is None


@needs_nvcc
@pytest.mark.parametrize(
    ("name", "sizes"),
    [("dcgan", {"BATCH": 8}), ("resnet18", {"BATCH": 2, "IMAGE": 32, "NUM_CLASSES": 10})],
)
def test_the_cuda_source_of_the_convnets_compiles(name: str, sizes: dict, tmp_path: Path) -> None:
    """A training step of examples/dcgan.py and examples/resnet18.py through the cuda
    pipeline: its convolutions tiled through shared memory where they tile."""
    gradfuse.reset()
    load_example(name, **sizes).record(steps=1, log_every=1)
    module = parse_tg(gradfuse.ir_text())
    gradfuse.reset()
    run_pipeline(module, "cuda")
    source = render_kernels(module, CUDATarget())
    assert "__shared__ float" in source
    assert nvcc_errors(source) is None
