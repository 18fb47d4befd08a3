"""The host program of a lowered module as C: loops, launches, host callbacks.

Params, arguments and the arena come in through a context struct; feeders and
receivers are C function pointers that call back into Python. Each iteration of an
outermost loop starts by looking at `gf_stop` (set by the SIGINT handler that
`gradfuse_sigint(1)` installs around a run: Ctrl-C stops at an iteration boundary,
status 2) and ends with the optional `ctx->check` (`check_finite`):

    int gradfuse_main(gf_ctx* ctx) {
      char* v0 = ctx->arena;
      float* v1 = (float*)ctx->params[0];
      for (long v3 = 0; v3 < 1000; v3 += 1) {
        GF_STOP((v3 - 0) / 1, v3, 0)
        gf_iter = (v3 - 0) / 1; gf_index = v3; gf_loop = 0;
        if (ctx->feed(0, v5)) GF_FAIL
        k0(v5, v1, ...);
        if (ctx->check && ctx->check(gf_iter)) GF_FAIL
      }
      return 0;
    }
"""

from __future__ import annotations

from math import prod
from pathlib import Path

from xdsl.dialects import arith, func, gpu, memref, scf
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from gradfuse.backend.c.cache import UnitFailed, Units, library_path
from gradfuse.backend.c.loop_render import CLoopTarget, LoopRenderer
from gradfuse.backend.c.profile import KINDS, Site, profiled_context
from gradfuse.backend.cstyle import CTarget, Renderer, element_ctype
from gradfuse.backend.disk_cache import verified
from gradfuse.backend.runner import callback_key, entry_function, host_call
from gradfuse.diagnostics import GradfuseError, position_of
from gradfuse.passes import run_by_kernels
from gradfuse.passes.loops.loop_ir import WRITES, buffer_of, is_kernel
from gradfuse.stats import constant_trips

MPI = """#include <mpi.h>
#define GF_ALLREDUCE(src, dst, n, type, mean) \\
  if (gf_allreduce(ctx, src, dst, n, MPI_##type, mean, sizeof *(dst))) GF_FAIL
static int gf_allreduce(gf_ctx* ctx, void* src, void* dst, long n, MPI_Datatype type, int mean,
                        size_t size) {
  if (ctx->ranks <= 1) {  /* no process group: a world of one */
    if (src != dst) memcpy(dst, src, n * size);
    return 0;
  }
  if (MPI_Allreduce(src == dst ? MPI_IN_PLACE : src, dst, (int)n, type, MPI_SUM,
                    MPI_COMM_WORLD) != MPI_SUCCESS) return 1;
  if (mean && type == MPI_FLOAT) for (long i = 0; i < n; i++) ((float*)dst)[i] /= (float)ctx->ranks;
  if (mean && type == MPI_DOUBLE) for (long i = 0; i < n; i++) ((double*)dst)[i] /= ctx->ranks;
  return 0;
}
"""
"""The host side of `tg.allreduce` (`gradfuse_allreduce_N` calls), in programs that
have one: `MPI_Allreduce` over `MPI_COMM_WORLD` when the run has a process group of
more than one rank (`ctx->ranks`), in place when the source is the target; the mean
divides the sum by the ranks."""
MPI_TYPES = {"float": "FLOAT", "double": "DOUBLE"}

CONTEXT = """
#include <signal.h>
typedef int (*gf_feed_fn)(int, void*);
typedef int (*gf_receive_fn)(int, void**, int);
typedef int (*gf_check_fn)(long);
typedef struct {
  void** params; void** args; void** results; char* arena;
  gf_feed_fn feed; gf_receive_fn receive;
  void** saved; long* sizes; long iteration; long index; long loop;
  long ranks;
  gf_check_fn check;
} gf_ctx;
#define GF_FAIL { ctx->iteration = gf_iter; ctx->index = gf_index; ctx->loop = gf_loop; return 1; }
#define GF_STOP(it, i, l) if (gf_stop) { ctx->iteration = it; ctx->index = i; ctx->loop = l; return 2; }
static volatile sig_atomic_t gf_stop = 0;
static struct sigaction gf_previous;
static void gf_on_sigint(int sig) { (void)sig; gf_stop = 1; }
int gradfuse_sigint(int on) {
  if (on) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = gf_on_sigint;
    sigemptyset(&sa.sa_mask);
    gf_stop = 0;
    return sigaction(SIGINT, &sa, &gf_previous);
  }
  sigaction(SIGINT, &gf_previous, 0);
  return gf_stop;
}
"""


class HostRenderer(Renderer):
    """Renders `func @main` of a lowered module into `int gradfuse_main(gf_ctx*)`; with
    `profile`, each host site timed (see `gradfuse.backend.c.profile`) and listed in `sites`."""

    def __init__(
        self,
        module: ModuleOp,
        globals_order: list[str],
        aliases: dict[str, str],
        profile: bool = False,
    ):
        super().__init__(CTarget())
        self.globals = {name: i for i, name in enumerate(globals_order)}
        self.global_names = list(globals_order)
        self.profile = profile
        self.sites: list[Site] = []  # profiling: the timed sites, by the index they record
        self.loop_trips: list[int | None] = []  # profiling: each outermost loop's trip count
        self.outer: int | None = None  # the outermost loop being rendered
        self.per_iteration: int | None = 1  # executions per iteration of `outer`
        self.written = {
            op.sym_name.data: _written_args(op)
            for op in module.ops
            if isinstance(op, func.FuncOp) and is_kernel(op)
        }
        self.saved: dict[int, list[int]] = {}  # top-level loop -> the params it saves
        self.aliases = aliases  # kernels left out for an equal one: name -> that one
        self.calls: list[func.CallOp] = []
        self.loops: list[scf.ForOp] = []  # outermost loops, by gf_loop
        self.source = ""
        self.kernel_texts: list[str] = []  # filled by `render_program`
        self.host_text = ""
        self.uses_mpi = False  # a `tg.allreduce`: the host unit includes `MPI`

    def main(self, fn: func.FuncOp) -> str:
        self.names, self.lines = {}, []
        for i, arg in enumerate(fn.body.block.args):
            t = element_ctype(arg.type.element_type)  # type: ignore[attr-defined]
            self.emit(f"{t}* {self.name(arg)} = ({t}*)ctx->args[{i}];", 1)
        self.emit("long gf_iter = -1, gf_index = 0, gf_loop = -1;", 1)
        if self.profile:
            self.emit("int gf_on = GF_IN_WINDOW(-1);", 1)
        self.host_block(fn.body.block, 1)
        return "int gradfuse_main(gf_ctx* ctx) {\n" + "\n".join(self.lines) + "\n  return 0;\n}\n"

    def params_written_before_a_call(self, loop: scf.ForOp) -> list[int]:
        """Params that an iteration writes before its last host call: what a failing
        callback would leave half-updated, so the loop saves them as each iteration starts."""
        written: set[int] = set()
        before_call: set[int] = set()
        for op in loop.body.walk():
            if is_kernel(op):
                name, operands = launched(op)
                stores = self.written[name]
                for k, v in enumerate(operands):
                    owner = v.owner
                    if k in stores and isinstance(owner, memref.GetGlobalOp):
                        written.add(self.globals[owner.name_.root_reference.data])
            elif isinstance(op, func.CallOp):
                before_call |= written
        return sorted(before_call)

    def timed(self, kind: str, name: str, text: str, depth: int) -> None:
        """Emits the statement `text`; when profiling, as a new site in `GF_TIMED`."""
        if not self.profile:
            self.emit(text, depth)
            return
        launch = None
        if kind in ("kernel", "feeder", "receiver"):
            launch = sum(s.launch is not None for s in self.sites)
        site = Site(len(self.sites), kind, name, launch, self.outer, self.per_iteration)
        self.sites.append(site)
        self.emit(f"GF_TIMED({site.index}, {KINDS.index(kind)}, {text})", depth)

    def host_block(self, block: Block, depth: int) -> None:
        for op in block.ops:
            r = self.name(op.results[0]) if op.results else ""
            if isinstance(op, arith.ConstantOp):
                self.op(op, depth)
            elif isinstance(op, memref.AllocOp):
                self.emit(f"char* {r} = ctx->arena;", depth)
            elif isinstance(op, memref.GetGlobalOp):
                t = element_ctype(op.memref.type.element_type)  # type: ignore[attr-defined]
                index = self.globals[op.name_.root_reference.data]
                self.emit(f"{t}* {r} = ({t}*)ctx->params[{index}];", depth)
            elif isinstance(op, memref.ViewOp):
                t = element_ctype(op.result.type.element_type)  # type: ignore[attr-defined]
                self.emit(
                    f"{t}* {r} = ({t}*)({self.name(op.source)} + {self.name(op.byte_shift)});",
                    depth,
                )
            elif is_kernel(op):
                name, operands = launched(op)
                args = ", ".join(self.name(a) for a in operands)
                self.timed("kernel", name, f"{self.aliases.get(name, name)}({args});", depth)
            elif isinstance(op, func.CallOp) and host_call(callee_of(op)) == "allreduce":
                self.allreduce(op, depth)
            elif isinstance(op, func.CallOp):
                index = len(self.calls)  # callbacks are numbered by call site
                self.calls.append(op)
                key = callback_key(op) or op.callee.root_reference.data
                if host_call(callee_of(op)) == "feeder":
                    text = f"if (ctx->feed({index}, {self.name(op.arguments[0])})) GF_FAIL"
                    self.timed("feeder", key, text, depth)
                else:
                    bufs = ", ".join(f"(void*){self.name(a)}" for a in op.arguments)
                    n = len(op.arguments)
                    text = (
                        f"{{ void* b[] = {{{bufs}}}; if (ctx->receive({index}, b, {n})) GF_FAIL }}"
                    )
                    self.timed("receiver", key, text, depth)
            elif isinstance(op, scf.ForOp):
                i, lo, hi, st = (
                    self.name(v) for v in (op.body.block.args[0], op.lb, op.ub, op.step)
                )
                self.emit(f"for (long {i} = {lo}; {i} < {hi}; {i} += {st}) {{", depth)
                if depth == 1:  # an outermost loop: Ctrl-C and check_finite at its iterations
                    n = len(self.loops)
                    self.emit(f"GF_STOP(({i} - {lo}) / {st}, {i}, {n})", depth + 1)
                    self.emit(f"gf_iter = ({i} - {lo}) / {st}; gf_index = {i};", depth + 1)
                    self.emit(f"gf_loop = {n};", depth + 1)
                    self.loops.append(op)
                    step = self.begin_step(op, n, depth + 1)
                outer_count = self.per_iteration
                if depth > 1 and self.profile:
                    trips = constant_trips(op)
                    known = trips is not None and outer_count is not None
                    self.per_iteration = outer_count * trips if known else None  # type: ignore[operator]
                if depth == 1 and any(isinstance(o, func.CallOp) for o in op.body.walk()):
                    self.saved[n] = self.params_written_before_a_call(op)
                    for k in self.saved[n]:
                        text = f"memcpy(ctx->saved[{k}], ctx->params[{k}], ctx->sizes[{k}]);"
                        self.timed("copy", self.global_names[k], text, depth + 1)
                self.host_block(op.body.block, depth + 1)
                self.per_iteration = outer_count
                if depth == 1:
                    self.emit("if (ctx->check && ctx->check(gf_iter)) GF_FAIL", depth + 1)
                    if self.profile:
                        self.emit(
                            f"if (gf_on) gf_record(ctx, {step}, 4, gf_iter, gf_s0);", depth + 1
                        )
                self.emit("}", depth)
                if depth == 1:
                    self.emit("gf_iter = -1;", depth)  # a failure after it is in no loop
                    if self.profile:
                        self.emit("gf_on = GF_IN_WINDOW(-1);", depth)
                        self.outer, self.per_iteration = None, 1
            elif isinstance(op, func.ReturnOp):
                for k, v in enumerate(op.arguments):
                    self.emit(f"ctx->results[{k}] = (void*){self.name(v)};", depth)
            elif not isinstance(op, scf.YieldOp):
                raise GradfuseError(
                    f"the C host renderer has no form for {op.name}", position_of(op.location)
                )

    def allreduce(self, op: func.CallOp, depth: int) -> None:
        """`tg.allreduce`'s call: `GF_ALLREDUCE(src, dst, n, FLOAT, mean)` (`MPI`)."""
        src, dst = op.arguments
        ty = dst.type
        assert isinstance(ty, MemRefType)
        t = element_ctype(ty.element_type)
        if t not in MPI_TYPES:
            raise GradfuseError(
                f"tg.allreduce of {ty.element_type} has no MPI type on the c backend"
                " (all-reduce f32 or f64)",
                position_of(op.location),
            )
        self.uses_mpi = True
        mean = int(callback_key(op) == "mean")
        n = prod(ty.get_shape())
        args = f"{self.name(src)}, {self.name(dst)}, {n}, {MPI_TYPES[t]}, {mean}"
        self.timed("allreduce", f"all_reduce {callback_key(op)}", f"GF_ALLREDUCE({args})", depth)

    def begin_step(self, loop: scf.ForOp, n: int, depth: int) -> int:
        """When profiling: a `step` site for outermost loop `n` and the code that starts
        timing an iteration inside the window; the site's index (-1 when not profiling)."""
        if not self.profile:
            return -1
        self.loop_trips.append(constant_trips(loop))
        self.outer, self.per_iteration = n, 1
        self.sites.append(Site(len(self.sites), "step", f"loop {n}", None, n, 1))
        self.emit("gf_on = GF_IN_WINDOW(gf_iter);", depth)
        self.emit("long long gf_s0 = gf_on ? gf_now() : 0;", depth)
        return len(self.sites) - 1


def callee_of(op: func.CallOp) -> str:
    return op.callee.root_reference.data


def launched(op: Operation) -> tuple[str, list[SSAValue]]:
    """The kernel that a kernel `func.call` runs, and its buffers."""
    assert isinstance(op, func.CallOp)
    return op.callee.root_reference.data, list(op.arguments)


def _written_args(fn: func.FuncOp) -> set[int]:
    """Indices of the kernel arguments that `fn` writes, in lanes or not."""
    args = list(fn.body.block.args)
    return {
        args.index(buffer_of(op))
        for op in fn.walk()
        if isinstance(op, WRITES) and buffer_of(op) in args
    }


def main_function(module: ModuleOp) -> func.FuncOp:
    """The function the host program runs: `@main`, else the module's only one."""
    return entry_function(module, "main")


def host_symbols(module: ModuleOp) -> list[str]:
    """The names of the params (`memref.global`s), in the order of `ctx->params`."""
    return [op.sym_name.data for op in module.ops if isinstance(op, memref.GlobalOp)]


def render_program(module: ModuleOp, profile: bool = False) -> HostRenderer:
    """Renders the whole C translation unit (kernels, then the host program) into the
    renderer's `source`; its `calls` are the host call sites by callback index and its
    `saved` the params that each top-level loop saves at the start of its iterations.
    With `profile`, the profiling build (`gradfuse.backend.c.profile`), its `sites` filled:

        render_program(module, profile=True).sites[0]  # Site(0, "step", "loop 0", ...)
    """
    loop_ir(module)
    renderer = LoopRenderer()
    renderer.kernels(module)
    return with_host(module, renderer, profile)


def loop_ir(module: ModuleOp) -> None:
    """Raises where `module`'s kernels are GPU grids (`gpu.func`, from
    `convert-kernel-to-gpu`), at the first: the c target prints the `cpu` pipeline's
    loop nests."""
    grids = (op for op in module.ops if isinstance(op, gpu.ModuleOp))
    grid = next((fn for g in grids for fn in g.body.block.ops), None)
    if grid is not None:
        raise GradfuseError(
            "the c target prints loop nests: lower with the cpu pipeline (-p cpu), not one"
            " that maps kernels onto GPU grids (default, cuda)",
            position_of(grid.location),
        )


def with_host(module: ModuleOp, renderer: Renderer, profile: bool = False) -> HostRenderer:
    """The host program of `module` rendered, with the kernels that `renderer` rendered."""
    host = HostRenderer(module, host_symbols(module), renderer.aliases, profile)
    main = host.main(main_function(module))
    host.kernel_texts = renderer.kernel_texts
    context = profiled_context(CONTEXT) if profile else CONTEXT
    host.host_text = "#include <string.h>\n" + context + (MPI if host.uses_mpi else "") + main
    host.source = "\n".join([renderer.t.prelude, *renderer.kernel_texts]) + host.host_text
    return host


def build_by_kernels(module: ModuleOp, tail: str, size: int) -> tuple[HostRenderer, Path]:
    """Runs the function-local passes `tail` (`kernel_tail`) `size` kernels at a time,
    each group rendered and given to gcc while the next one's passes run; the program and
    its library (cached as `build_library`'s: the same source, the same library)."""
    renderer = LoopRenderer()
    renderer.start_kernels()
    units = Units(module)

    def each(part: ModuleOp) -> None:
        texts = [hidden(k) for k in renderer.more_kernels(part)]
        if texts:
            units.add(PRELUDE + "\n".join(texts))

    try:
        run_by_kernels(module, tail, size, each)
        host = with_host(module, renderer)
        units.add(host_unit(host, [hidden(k) for k in host.kernel_texts]))
        target = library_path(host.source)
        return host, target if verified(target) else units.link(target)
    except UnitFailed as failed:
        raise units.error(failed) from None
    finally:
        units.close()


HIDDEN = '__attribute__((visibility("hidden"))) void '
PRELUDE = CLoopTarget.prelude + "\n"
"""What each translation unit of a program built in several starts with."""


def hidden(kernel: str) -> str:
    """A kernel's text as an external of the library only (it is `static` in one unit)."""
    return kernel.replace(CTarget.kernel_prefix + " ", HIDDEN, 1)


def host_unit(host: HostRenderer, kernels: list[str]) -> str:
    """The host program's translation unit: the prelude, the prototypes of the `hidden`
    `kernels` it calls, and the program."""
    protos = "".join(k.split("{", 1)[0].rstrip() + ";\n" for k in kernels)
    return PRELUDE + protos + host.host_text


def split_units(host: HostRenderer, parts: int) -> list[str]:
    """The program as `parts` translation units of kernels and a last one for the host
    program, each with the prelude: the kernels become hidden externals (one library)
    that the host unit declares. The kernels are dealt out largest first, each to the
    unit with the least source yet (gcc's time goes with a unit's size; DCGAN b8's cpu
    C as two halves by count: 728 and 855 KB, 6.2 and 6.9 s), in program order within
    a unit."""
    kernels = [hidden(k) for k in host.kernel_texts]
    if parts < 2 or not kernels:
        return [host.source]
    bins: list[list[int]] = [[] for _ in range(min(parts, len(kernels)))]
    sizes = [0] * len(bins)
    for k in sorted(range(len(kernels)), key=lambda k: -len(kernels[k])):
        least = sizes.index(min(sizes))
        bins[least].append(k)
        sizes[least] += len(kernels[k])
    units = [PRELUDE + "\n".join(kernels[k] for k in sorted(b)) for b in bins]
    return [*units, host_unit(host, kernels)]


def render_c(module: ModuleOp) -> str:
    """The whole C translation unit: kernels, then the host program."""
    return render_program(module).source


__all__ = ["render_c", "render_program", "split_units", "host_symbols", "main_function"]
