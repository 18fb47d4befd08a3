"""`ir-opt`: xDSL's opt driver with gradfuse's dialects, passes, frontends and targets.

    ir-opt model.tg -p tg-autodiff,cse        # prints .tg (the default for .tg input)
    ir-opt model.tg --pipeline default -t mlir
    ir-opt model.mlir -t tg                   # MLIR (generic or custom) back to .tg

Bad input gives one `file:line:col: error: ...` diagnostic and exit status 1.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from typing import IO

from lark.exceptions import LarkError
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from gradfuse import passes
from gradfuse.diagnostics import GradfuseError, decode_source
from gradfuse.gcpause import paused_gc


class IrOptMain(xDSLOptMain):
    """xDSLOptMain extended with `.tg` input, `-t tg` output and named pipelines."""

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        from gradfuse.dialects.kernel import KERNEL
        from gradfuse.dialects.lanes import LANES
        from gradfuse.dialects.tg import TG

        self.ctx.register_dialect("tg", lambda: TG)
        self.ctx.register_dialect("kernel", lambda: KERNEL)
        self.ctx.register_dialect("lanes", lambda: LANES)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in passes.PASSES.items():
            self.register_pass(name, factory)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["tg"] = self.parse_tg_input

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets["tg"] = self.print_tg_output
        self.available_targets["kernels"] = self.print_kernel_listing
        self.available_targets["c"] = _code_target("print_c", self)
        self.available_targets["cuda"] = _code_target("print_cuda", self)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--kernel-stats",
            action="store_true",
            help="after the passes, print kernel launches per loop iteration and per"
            " program and the peak bytes of temporaries (as // comment lines)",
        )
        arg_parser.add_argument(
            "--pipeline",
            default=None,
            help=f"named pipeline to run before -p ({', '.join(passes.PIPELINES)})",
        )

    def setup_pipeline(self) -> None:
        spec = ",".join(s for s in (self.args.pipeline, self.args.passes) if s)
        self.args.passes = passes.expand(spec)
        super().setup_pipeline()

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0):
        if file_extension == "tg":
            return self.parse_tg_input(chunk, start_offset)
        return super().parse_chunk(chunk, file_extension, start_offset)

    def parse_tg_input(self, chunk: IO[bytes], line_offset: int = 0) -> ModuleOp:
        from gradfuse.frontend.parser import parse_tg

        text = decode_source(chunk.read(), self.get_input_name(), line_offset)
        return parse_tg(text, self.get_input_name(), line_offset)

    def print_tg_output(self, module: ModuleOp, out: IO[str]) -> None:
        from gradfuse.frontend.printer import print_tg

        try:
            out.write(print_tg(module, print_locations=self.args.print_debuginfo))
        except GradfuseError:
            if DEFAULTED_TG_TARGET not in getattr(self, "extra_args", []):
                raise
            # `-t tg` was only the default for .tg input: lowered IR prints as MLIR.
            from xdsl.printer import Printer

            Printer(stream=out, print_debuginfo=self.args.print_debuginfo).print_op(module)
            out.write("\n")

    def output_resulting_program(self, prog: ModuleOp) -> str:
        text = super().output_resulting_program(prog)
        if self.args.kernel_stats:
            from gradfuse.stats import kernel_stats

            st = kernel_stats(prog)
            loops = ", ".join(str(n) for n in st.per_loop) or "no loop"
            text += (
                f"// kernel-stats: {st.kernels_per_iteration} per iteration ({loops}),"
                f" {st.kernels} in the program, {st.launches} launches per run,"
                f" peak {st.peak_bytes} bytes\n"
            )
        return text

    def print_kernel_listing(self, module: ModuleOp, out: IO[str]) -> None:
        from gradfuse.dump import dump_kernels

        out.write(dump_kernels(module))

    def prepare_output(self) -> IO[str]:
        # Everything goes to a buffer first: a failing run leaves no partial file.
        self.buffer = io.StringIO()
        self.buffer.close = lambda: None  # type: ignore[method-assign]
        return self.buffer


DEFAULTED_TG_TARGET = "--target=tg"
"""How `_default_target` spells the `-t tg` it adds (so that the printer may fall back)."""


def _default_target(argv: list[str]) -> list[str]:
    """`-t tg` is the default for .tg input (MLIR where the result has no .tg form),
    `-t mlir` otherwise."""
    if any(a in ("-t", "--target") or a.startswith(("--target=", "-t")) for a in argv):
        return argv
    tg_input = any(a.endswith(".tg") for a in argv if not a.startswith("-"))
    tg_frontend = (
        "tg" in argv[argv.index("-f") + 1 : argv.index("-f") + 2] if "-f" in argv else False
    )
    return [*argv, DEFAULTED_TG_TARGET] if tg_input or tg_frontend else argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ir-opt` console script."""
    args = _default_target(list(sys.argv[1:] if argv is None else argv))
    tool = None
    try:
        IrOptMain.extra_args = args  # type: ignore[attr-defined]
        tool = IrOptMain(args=args)
        with paused_gc():
            tool.run()
    except SystemExit as e:  # argparse usage errors and --version
        return int(e.code or 0)
    except GradfuseError as e:
        return _fail(e.with_source_line(tool.get_input_name() if tool else None).render())
    except (ParseError, ArgSpecParseError, DiagnosticException, LarkError) as e:
        msg = str(e)
        first = msg.lstrip().splitlines()[0] if msg.strip() else ""
        return _fail(msg if "error" in first else f"error: {msg.strip()}")
    except OSError as e:
        return _fail(f"error: cannot read '{e.filename}': {e.strerror}")
    except ValueError as e:
        return _fail(f"error: {e}")
    except Exception as e:  # a bug in gradfuse: still one line, and a way to see more
        if os.environ.get("GRADFUSE_DEBUG"):
            raise
        return _fail(
            f"error: internal compiler error: {type(e).__name__}: {e}"
            " (set GRADFUSE_DEBUG=1 to see the traceback)"
        )
    output = tool.buffer.getvalue()
    if tool.args.output_file:
        tmp = tool.args.output_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(output)
        os.replace(tmp, tool.args.output_file)
    else:
        sys.stdout.write(output)
    return 0


def _code_target(name: str, tool: xDSLOptMain):
    """`-t c` / `-t cuda`: the renderer's printer, imported when used."""

    def emit(module: ModuleOp, out: IO[str]) -> None:
        from gradfuse.tools import targets

        getattr(targets, name)(module, out, tool.get_input_name())

    return emit


def _fail(message: str) -> int:
    sys.stdout.flush()
    print(message.rstrip(), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
