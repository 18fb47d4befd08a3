"""`ir-run` end to end: .npz in, .npz out, one-line diagnostics and exit status 1."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gradfuse.tools.ir_run import main

ROOT = Path(__file__).resolve().parents[3]

PROGRAM_MLIR = """\
"builtin.module"() ({
  "func.func"() <{sym_name = "main", function_type = (tensor<2xf32>) -> tensor<2xf32>}> ({
  ^bb0(%x: tensor<2xf32>):
    %w0 = "tg.param"() <{key = "w", init = 1.0 : f64}> : () -> tensor<2xf32>
    %r = "tg.for"(%x) <{lower = 0 : i64, upper = 3 : i64, step = 1 : i64}> ({
    ^bb0(%i: index, %a: tensor<2xf32>):
      %f = "tg.feeder"() <{key = "noise"}> : () -> tensor<2xf32> loc("prog.mlir":7:7)
      %w = "tg.param"() <{key = "w"}> : () -> tensor<2xf32>
      %b = "tg.add"(%a, %f) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      %w2 = "tg.mul"(%w, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      "tg.assign"(%w2) <{key = "w"}> : (tensor<2xf32>) -> ()
      "tg.receiver"(%b, %w2) <{key = "step out"}> : (tensor<2xf32>, tensor<2xf32>) -> ()
      "tg.yield"(%b) : (tensor<2xf32>) -> ()
    }) : (tensor<2xf32>) -> tensor<2xf32>
    "func.return"(%r) : (tensor<2xf32>) -> ()
  }) : () -> ()
}) : () -> ()
"""

PROGRAM_TG = """\
func @main(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %w = tg.param "w" init=2.0 : tensor<2xf32>
  %f = tg.feeder "noise" : tensor<2xf32>
  %y = tg.mul %x, %w : tensor<2xf32>
  %z = tg.add %y, %f : tensor<2xf32>
  return %z
}
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "prog.mlir"
    path.write_text(PROGRAM_MLIR)
    return path


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    path = tmp_path / "in.npz"
    np.savez(
        path, arg0=np.zeros(2, np.float32), noise=np.arange(6.0, dtype=np.float32).reshape(3, 2)
    )
    return path


def run_ok(argv: list[str], capsys) -> str:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert captured.err == ""
    return captured.out


def run_fails(argv: list[str], capsys) -> str:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert status == 1
    lines = captured.err.splitlines()
    assert len([line for line in lines if "error:" in line]) == 1, captured.err
    assert len(lines) in (1, 3), captured.err  # with a position: the line and a caret
    if len(lines) == 3:
        assert lines[2].strip() == "^"
    assert "Traceback" not in captured.err
    return lines[0]


def test_outputs_results_params_and_receivers(program, inputs, tmp_path, capsys):
    out = tmp_path / "out.npz"
    stdout = run_ok([program, "--inputs", inputs, "--outputs", out], capsys)
    noise = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    acc = np.cumsum(noise, axis=0)  # carried values after each iteration
    with np.load(out) as data:
        names = set(data.files)
        np.testing.assert_array_equal(data["result0"], acc[-1])
        np.testing.assert_array_equal(data["param.w"], np.prod(acc, axis=0))
        for call in range(3):
            np.testing.assert_array_equal(data[f"step out.{call}.0"], acc[call])
        np.testing.assert_array_equal(data["step out.2.1"], np.prod(acc, axis=0))
    assert names == {"result0", "param.w"} | {f"step out.{c}.{i}" for c in range(3) for i in (0, 1)}
    assert "result0" in stdout and "param.w" in stdout and "step out.2.1" in stdout
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ir-run-")]


def test_outputs_can_be_the_next_params(program, inputs, tmp_path, capsys):
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    run_ok([program, "--inputs", inputs, "--outputs", first], capsys)
    run_ok([program, "--inputs", inputs, "--outputs", second, "--params", first], capsys)
    with np.load(first) as a, np.load(second) as b:
        np.testing.assert_array_equal(b["param.w"], a["param.w"] ** 2)


def test_params_by_plain_key(program, inputs, tmp_path, capsys):
    params, out = tmp_path / "p.npz", tmp_path / "out.npz"
    np.savez(params, w=np.zeros(2, np.float32))
    run_ok([program, "--inputs", inputs, "--outputs", out, "--params", params], capsys)
    with np.load(out) as data:
        np.testing.assert_array_equal(data["param.w"], [0, 0])


def test_float64_mode(program, inputs, tmp_path, capsys):
    out = tmp_path / "out.npz"
    run_ok([program, "--inputs", inputs, "--outputs", out, "--dtype", "float64"], capsys)
    with np.load(out) as data:
        assert data["result0"].dtype == np.float64


def test_tg_file(tmp_path, capsys):
    pytest.importorskip("gradfuse.frontend.parser")
    path, inp, out = tmp_path / "p.tg", tmp_path / "in.npz", tmp_path / "out.npz"
    path.write_text(PROGRAM_TG)
    np.savez(inp, arg0=np.ones(2), noise=np.array([0.5, 1.5], np.float32))
    run_ok([path, "--inputs", inp, "--outputs", out], capsys)
    with np.load(out) as data:
        np.testing.assert_array_equal(data["result0"], [2.5, 3.5])


def test_example_program_trains(tmp_path, capsys):
    pytest.importorskip("gradfuse.frontend.parser")
    out = tmp_path / "out.npz"
    example = ROOT / "examples" / "linreg"
    run_ok([f"{example}.tg", "--inputs", f"{example}.npz", "--outputs", out], capsys)
    with np.load(out) as data:
        np.testing.assert_allclose(data["param.w"].ravel(), [1, -2, 0.5, 3], atol=1e-2)
        assert data["loss.19.0"] < 1e-3 * data["loss.0.0"]


def test_corrupt_npz(program, tmp_path, capsys):
    bad, out = tmp_path / "bad.npz", tmp_path / "out.npz"
    bad.write_bytes(b"PK\x03\x04 this is not a zip file")
    line = run_fails([program, "--inputs", bad, "--outputs", out], capsys)
    assert line.startswith(f"error: inputs {bad}: not a readable .npz file")
    assert not out.exists()


def test_npy_instead_of_npz(program, tmp_path, capsys):
    npy, out = tmp_path / "x.npy", tmp_path / "out.npz"
    np.save(npy, np.zeros(2))
    line = run_fails([program, "--inputs", npy, "--outputs", out], capsys)
    assert line == f"error: inputs {npy}: not an .npz archive"
    assert not out.exists()


def test_missing_program_file(inputs, tmp_path, capsys):
    out = tmp_path / "out.npz"
    missing = tmp_path / "nope.mlir"
    line = run_fails([missing, "--inputs", inputs, "--outputs", out], capsys)
    assert line == f"error: cannot read {missing}: No such file or directory"
    assert not out.exists()


def test_missing_inputs_file(program, tmp_path, capsys):
    out = tmp_path / "out.npz"
    line = run_fails([program, "--inputs", tmp_path / "none.npz", "--outputs", out], capsys)
    assert line == f"error: inputs {tmp_path / 'none.npz'}: no such file"
    assert not out.exists()


def test_feeder_array_of_wrong_shape(program, tmp_path, capsys):
    inp, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inp, arg0=np.zeros(2), noise=np.zeros((2, 3)))
    line = run_fails([program, "--inputs", inp, "--outputs", out], capsys)
    assert line.startswith(
        'prog.mlir:7:7: error: feeder "noise" (call 0): array of shape (2, 3) is neither (2,)'
    )
    assert line.endswith("(in iteration 0 (i = 0) of the tg.for)")
    assert not out.exists()


def test_feeder_array_of_strings(program, tmp_path, capsys):
    inp, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inp, arg0=np.zeros(2), noise=np.array(["a", "b"]))
    line = run_fails([program, "--inputs", inp, "--outputs", out], capsys)
    assert 'feeder "noise" (call 0): returned <U1 data, expected numbers' in line
    assert not out.exists()


def test_feeder_exhausted_leaves_no_output(program, tmp_path, capsys):
    inp, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inp, arg0=np.zeros(2), noise=np.zeros((2, 2), np.float32))  # 2 items for 3 iterations
    out.write_bytes(b"old")
    line = run_fails([program, "--inputs", inp, "--outputs", out], capsys)
    assert "(call 2): exhausted" in line and "iteration 2" in line
    assert out.read_bytes() == b"old"  # never a partial output file


def test_parse_error_has_a_position(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text(PROGRAM_MLIR.replace('"tg.add"', '"tg.addd"'))
    line = run_fails([bad], capsys)
    assert re.fullmatch(
        rf"{re.escape(str(bad))}:9:\d+: error: Operation tg.addd is not registered", line
    )


def test_verify_error_has_a_position(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    text = PROGRAM_MLIR.replace('"tg.add"', '"tg.cmplt"').replace(
        "-> tensor<2xf32>\n      %w2", '-> tensor<2xf32> loc("bad.tg":9:7)\n      %w2'
    )
    bad.write_text(text)
    line = run_fails([bad], capsys)
    assert line == (
        "bad.tg:9:7: error: tg.cmplt: result type should be tensor<2xi1>, got tensor<2xf32>"
    )


def test_tg_parse_error(tmp_path, capsys):
    pytest.importorskip("gradfuse.frontend.parser")
    bad = tmp_path / "bad.tg"
    bad.write_text(PROGRAM_TG.replace("tg.mul %x, %w", "tg.mul %x %w"))
    line = run_fails([bad], capsys)
    assert line.startswith(f"{bad}:4:")


def test_grad_is_refused(tmp_path, capsys):
    path = tmp_path / "g.mlir"
    path.write_text(PROGRAM_MLIR.replace('"tg.add"(%a, %f)', '"tg.grad"(%a, %f)'))
    inp = tmp_path / "in.npz"
    np.savez(inp, arg0=np.zeros(2), noise=np.zeros(2, np.float32))
    argv = [path, "--inputs", inp, "--pipeline", "none"]
    line = run_fails([*argv, "--backend", "reference"], capsys)
    assert "tg.grad cannot be run: it must be expanded by the `tg-autodiff` pass first" in line
    line = run_fails([*argv, "--backend", "c"], capsys)
    assert "the c backend runs lowered IR and this program has tg ops" in line


GRAD_TG = """\
func @main(%x: tensor<3xf32>) -> (tensor<3xf32>) {
  %s = tg.mul %x, %x : tensor<3xf32>
  %g = tg.grad %s wrt %x : tensor<3xf32>
  return %g
}
"""


@pytest.mark.parametrize("backend", ["reference", "numpy", "lowered"])
def test_grad_is_expanded_by_the_default_pipeline(tmp_path, capsys, backend):
    path = tmp_path / "g.tg"
    path.write_text(GRAD_TG)
    inp, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inp, arg0=np.array([1.0, -2.0, 3.0], np.float32))
    run_ok([path, "--inputs", inp, "--outputs", out, "--backend", backend], capsys)
    np.testing.assert_allclose(np.load(out)["result0"], [2.0, -4.0, 6.0])


def test_usage_error(capsys):
    line = run_fails(["--bogus"], capsys)
    assert line.startswith("error: ")


def test_no_outputs_flag_only_prints(program, inputs, capsys):
    stdout = run_ok([program, "--inputs", inputs], capsys)
    assert stdout.splitlines()[0].startswith("result0")
