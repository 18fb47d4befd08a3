"""`ir-run`: runs a tg program with the reference interpreter, arrays in and out as .npz.

    ir-run model.tg --inputs in.npz --outputs out.npz [--params p.npz] [--entry main]

Inputs (`--inputs`, one .npz):
  - `arg0`, `arg1`, ...: the entry function's arguments, by position;
  - every other entry feeds the `tg.feeder` of that key: an array of the feeder's
    shape is returned at every call, an array of shape `(N, *shape)` gives item i
    at call i.
Params (`--params`, one .npz): initial param values by key. When some keys start
with `param.`, only those are taken (prefix dropped), so the outputs of one run
can be the params of the next.
Outputs (`--outputs`, one .npz, written only when the whole run succeeded):
  - `result0`, `result1`, ...: the entry function's results;
  - `param.<key>`: the final value of every param;
  - `<key>.<call>.<index>`: operand `index` of receiver `key` at its call `call`
    (both counted from 0), e.g. `saving params.3.0`.
  A key's `/`, `\\`, `%`, `:` and control characters are written `%XX` (`a/b` gives
  member `a%2Fb`), so that no member name climbs out of the archive or hides a NUL.
A short summary (names, shapes, first values) goes to stdout. Any bad input gives
one line `file:line:col: error: ...` (or `error: ...`) on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func, FuncOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from gradfuse.diagnostics import GradfuseError, Position, decode_source, position_of, quote
from gradfuse.dialects.tg import TG

SUMMARY_LINES = 24
"""At most this many outputs are listed on stdout; the rest are counted."""


class _ArgParser(argparse.ArgumentParser):
    """Reports usage errors as a GradfuseError (one line, exit status 1)."""

    def error(self, message: str) -> NoReturn:
        raise GradfuseError(f"{message} (see ir-run --help)")


def _parser() -> argparse.ArgumentParser:
    p = _ArgParser(prog="ir-run", description="Run a tg program on the NumPy reference.")
    p.add_argument("file", help="program: .tg text or .mlir (tg, func, builtin)")
    p.add_argument("--inputs", help=".npz with arg0, arg1, ... and feeder arrays by key")
    p.add_argument("--outputs", help=".npz to write results, params and received arrays to")
    p.add_argument("--params", help=".npz with initial param values by key")
    p.add_argument("--entry", default="main", help="entry function (default: main)")
    p.add_argument(
        "--backend",
        default=None,
        choices=["reference", "numpy", "lowered", "c", "cuda", "cuda-emu"],
        help="what runs the program (default: $GRADFUSE_BACKEND, else cuda when PyCUDA"
        " sees a GPU, else c; reference is the NumPy interpreter every backend is tested"
        " against; cuda-emu runs the cuda backend's CUDA on this CPU)",
    )
    p.add_argument(
        "--pipeline",
        default=None,
        help="passes to run first (default: the backend's; 'none' for no pass)",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="float64 computes every float value in float64",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="time every launch of each step (c, cuda, cuda-emu, reference) and print the kernel"
        " table, the time per layer and the step overview",
    )
    p.add_argument("--trace", help="with --profile: write a Chrome trace (Perfetto) here")
    return p


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise GradfuseError(f"cannot read {path}: {err.strerror or err}") from None
    return decode_source(data, str(path))


def _verify(module: ModuleOp) -> None:
    """Verifies `module`, naming the position of the first op that fails."""
    try:
        module.verify()
    except VerifyException as err:
        for op in module.walk():
            try:
                op.verify(verify_nested_ops=False)
            except VerifyException as inner:
                raise GradfuseError(str(inner), position_of(op.location)) from None
        raise GradfuseError(str(err)) from None


def load_module(path: Path) -> ModuleOp:
    """Parses and verifies a `.tg` or `.mlir` file."""
    text = _read_text(path)
    if path.suffix == ".tg":
        try:
            from gradfuse.frontend.parser import parse_tg
        except ImportError as err:
            raise GradfuseError(f"{path}: the .tg frontend is not available ({err})") from err
        module = parse_tg(text, str(path))
    else:
        ctx = Context()
        for dialect in (Builtin, Func, TG):
            ctx.load_dialect(dialect)
        try:
            module = Parser(ctx, text, str(path)).parse_module()
        except ParseError as err:
            loc = err.span.get_location()
            raise GradfuseError(err.msg, Position(loc.file, loc.line, loc.col)) from None
    _verify(module)
    return module


def _check_entry(module: ModuleOp, entry: str, path: Path, text: str) -> None:
    """The program must have the entry function (or exactly one function), on every
    backend; else one sentence, at the start of the file."""
    names = [op.sym_name.data for op in module.ops if isinstance(op, FuncOp)]
    if entry in names or len(names) == 1:
        return
    listed = ", ".join(f"@{n}" for n in names) or "none"
    first = text.splitlines()[0] if text.strip() else None
    raise GradfuseError(
        f"there is no function @{entry} to run (functions: {listed}); choose one with --entry",
        Position(str(path), 1, 1, first),
    )


_UNSAFE = set("/\\%:") | {chr(c) for c in range(0x20)} | {"\x7f"}


def member_name(name: str) -> str:
    """An output name as an .npz member name: `/`, `\\`, `%`, `:` and control
    characters as `%XX` (UTF-8), so that no member climbs out of the archive
    (`../x` gives `..%2Fx`) and the name reads back with `urllib.parse.unquote`."""
    return "".join(
        "".join(f"%{b:02X}" for b in c.encode("utf-8")) if c in _UNSAFE else c for c in name
    )


def load_npz(path: str, what: str) -> dict[str, np.ndarray]:
    """All arrays of an .npz file, read eagerly so a corrupt member fails here."""
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise GradfuseError(f"{what} {path}: no such file") from None
    except Exception as err:
        raise GradfuseError(f"{what} {path}: not a readable .npz file ({err})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise GradfuseError(f"{what} {path}: not an .npz archive")
    try:
        with data:
            return {name: np.asarray(data[name]) for name in data.files}
    except Exception as err:
        raise GradfuseError(f"{what} {path}: not a readable .npz file ({err})") from None


def _split_inputs(inputs: dict[str, np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """`arg0`, `arg1`, ... as the argument list; everything else as feeders."""
    n = 0
    while f"arg{n}" in inputs:
        n += 1
    args = [inputs[f"arg{i}"] for i in range(n)]
    return args, {
        k: v
        for k, v in inputs.items()
        if not (k[:3] == "arg" and k[3:].isdigit() and int(k[3:]) < n)
    }


def _write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Writes `arrays` atomically: a temp file in the same folder, then `os.replace`."""
    folder, tmp = os.path.dirname(os.path.abspath(path)), ""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ir-run-", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except OSError as err:
        raise GradfuseError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def _summary(arrays: dict[str, np.ndarray]) -> str:
    """`name  shape dtype  first values`, one line per output."""
    lines = []
    for name, arr in list(arrays.items())[:SUMMARY_LINES]:
        flat = arr.reshape(-1)
        values = ", ".join(f"{v:.6g}" if arr.dtype.kind == "f" else str(v) for v in flat[:4])
        more = ", ..." if flat.size > 4 else ""
        shape = "x".join(map(str, arr.shape)) or "scalar"
        lines.append(f"{name:<24} {shape:>12} {arr.dtype!s:<8} [{values}{more}]")
    if len(arrays) > SUMMARY_LINES:
        lines.append(f"... and {len(arrays) - SUMMARY_LINES} more")
    return "\n".join(lines)


def run_file(opts: argparse.Namespace) -> dict[str, np.ndarray]:
    """Runs the program of `opts` and returns the named output arrays."""
    module = load_module(Path(opts.file))
    _check_entry(module, opts.entry, Path(opts.file), _read_text(Path(opts.file)))
    inputs = load_npz(opts.inputs, "inputs") if opts.inputs else {}
    params = load_npz(opts.params, "params") if opts.params else {}
    if any(k.startswith("param.") for k in params):  # an ir-run outputs file: its params
        params = {k.removeprefix("param."): v for k, v in params.items() if k.startswith("param.")}
    args, feeders = _split_inputs(inputs)
    from gradfuse.backend import compile_module

    pipeline = "" if opts.pipeline == "none" else opts.pipeline
    extra = {"dtype": np.float64} if opts.dtype == "float64" else {}
    backend = opts.backend or ("reference" if extra else None)
    if extra and backend != "reference":
        raise GradfuseError("--dtype float64 needs --backend reference")
    if opts.trace and not opts.profile:
        raise GradfuseError("--trace needs --profile")
    source = module.clone() if opts.profile else module
    program = compile_module(module, backend, pipeline)
    kwargs = {"args": args, "feeders": feeders, "params": params, "entry": opts.entry, **extra}
    if opts.profile:
        result = _profiled(program, source, kwargs, opts.trace)
    else:
        result = program.run(**kwargs)
    named: list[tuple[str, np.ndarray]] = [
        (f"result{i}", value) for i, value in enumerate(result.results)
    ]
    named += [(f"param.{key}", value) for key, value in result.params.items()]
    for key, calls in result.received.items():
        for call, arrays in enumerate(calls):
            named += [(f"{key}.{call}.{index}", value) for index, value in enumerate(arrays)]
    out: dict[str, np.ndarray] = {}
    for name, value in named:
        member = member_name(name)
        if member in out:
            raise GradfuseError(
                f"two outputs are named {quote(member)}: rename a param or a receiver"
            )
        out[member] = value
    return out


def _profiled(program: Any, source: ModuleOp, kwargs: dict[str, Any], trace: str | None) -> Any:
    """Runs `program` profiled (every step recorded) and prints the kernel table of its
    first step, the time per layer and the overview; `trace`: the Chrome trace's file."""
    from gradfuse.profiler import profile

    if not any(op.dialect_name() == "tg" for op in source.walk()):
        raise GradfuseError("--profile needs a tg program (the launches are named from its ops)")
    with profile(with_flops=True) as prof:
        result = prof.run(program, source, **kwargs)
    print(prof.summary())
    if trace:
        prof.export_chrome_trace(trace)
        print(f"trace: {trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return result


def _diagnostic(err: GradfuseError, program: str | None) -> str:
    """`file:line:col: error: message` on one line, then the offending line and a caret
    (`GradfuseError.render`). A line that the error does not carry is read from the
    program file only: never from another file that a `loc(...)` names."""
    err = err.with_source_line(program)
    return GradfuseError(" ".join(err.message.split()), err.position).render()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `ir-run`; returns the exit status."""
    opts = None
    try:
        opts = _parser().parse_args(argv)
        outputs = run_file(opts)
        if opts.outputs:
            _write_npz(opts.outputs, outputs)
    except GradfuseError as err:
        print(_diagnostic(err, opts.file if opts else None), file=sys.stderr)
        return 1
    except Exception as err:  # never a traceback for the user
        print(f"error: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(_summary(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
