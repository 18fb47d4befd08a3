"""`kernel-fuse-rows`: consecutive kernels that run over the same rows become one launch.

After `tg-fuse`, a softmax is three kernels (max, sum of exponentials, normalise) and
a LayerNorm forward three more, each reading only its own row of what the one before
wrote. This pass puts such a run of launches into one `kernel.rows` (see
`kernel_rows`): for each row, the kernels in order. A kernel's rows are a leading
part of its parallel dims (all of them, all but the last, ... the first); a run shares
one choice that keeps every written buffer row-aligned (`row_conflict`, checked as
kernels join by `RowAlignment`):

```
kernel.kernel "k3" reduction domain [2, 4, 16, 16] parallel 3 ...   // row max
kernel.kernel "k4" reduction domain [2, 4, 16, 16] parallel 3 ...   // sum of exp
kernel.kernel "k5" elementwise domain [2, 4, 16, 16] parallel 4 ... // normalise
// becomes
"kernel.rows"() <{sym_name = "r3", rows = array<i64: 2, 4, 16>}> ({ k3 k4 k5 })
```

Only `kernel.alloc`s may stand between the launches of a run (the run is placed at
its last launch, after them). A horizontal group joins a run whole; or, where only
some of its kernels fit (a stack slot's [1, B, H] kernel beside a [1] counter), those
join and end the run, and the rest stay a launch after it (a group's kernels do not
depend on each other).
A [1] kernel that does not fit (a recurrence's step counter, which every row reads,
incremented after the step) joins a run over one dim with the buffers it writes kept
once per row, each row reading and incrementing its own copy (`row_private`).
Of the rows a run may take, it takes those that keep the most GPU threads busy.
A kernel joins only if a row of it has at most `MAX_ROW_POINTS` points: one block's
work on a GPU. A kernel over flat rows (a linear layer on [B, T, C] runs over [B*T])
joins a run over [B] with its first dim split into [B, T] (`kernel_domain.split_first`), where each
row then writes its own block of T rows of the flat buffers.

A time step of an LSTM (Tacotron 2's decoder: batch 64, 4 gates of 1024) is then one
launch over the batch: the gate contractions ([64, 4096 | K], 4096 points a row), the
cell update, the attention's row-wise contractions and softmax, and the projections.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from gradfuse.dialects import kernel as K
from gradfuse.dialects.kernel_rows import RowAlignment, RowsOp
from gradfuse.passes.lib.gpu_func import MAX_BLOCK
from gradfuse.passes.lib.kernel_domain import split_first
from gradfuse.passes.lib.row_private import privatize, scalar_kernel

MAX_ROW_POINTS = 4096
"""The most parallel points a kernel may have in one row (a GPU block's 256 threads x
16): an LSTM's 4 gates of 1024 hidden units."""

Rows = tuple[int, ...]


def row_choices(k: K.KernelOp, inner: bool = False) -> list[Rows]:
    """The rows `k` may run over, longest first, each with at most `MAX_ROW_POINTS`
    points a row: its parallel dims or all but the last; in an inner loop (`inner`)
    also every shorter leading part, down to the first dim."""
    par = k.domain_sizes[: k.num_parallel]
    lengths = range(len(par), 0, -1) if inner else (len(par), len(par) - 1)
    choices = [par[:n] for n in lengths if n >= 1]
    return [r for r in choices if prod(par[len(r) :]) <= MAX_ROW_POINTS]


def _kernels(op: Operation) -> list[K.KernelOp] | None:
    """The kernels a launch runs, or None when `op` is no launch that may join a run."""
    if isinstance(op, K.KernelOp):
        return [op]
    if isinstance(op, K.GroupOp):
        ks = list(op.body.block.ops)
        return ks if all(isinstance(k, K.KernelOp) for k in ks) else None  # type: ignore[return-value]
    return None


@dataclass
class _Run:
    launches: list[Operation]
    kernels: list[K.KernelOp]
    choices: dict[Rows, RowAlignment]  # the rows the run may still take, and their state
    inner: bool  # in a loop inside the step: rows may be any leading part (`row_choices`)

    def extended(self, launch: Operation, ks: list[K.KernelOp]) -> _Run | None:
        choices = {
            r: state
            for r, state in self.choices.items()
            if all(r in row_choices(k, self.inner) for k in ks) and state.add(ks)
        }
        grown = _Run([*self.launches, launch], [*self.kernels, *ks], choices, self.inner)
        return grown if choices else None

    def realigned(self) -> _Run:
        """The run with its row alignments computed anew (after its accesses changed)."""
        fresh = {r: RowAlignment(r) for r in self.choices}
        kept = {r: s for r, s in fresh.items() if s.add(self.kernels)}
        return _Run(self.launches, self.kernels, kept, self.inner)


def _start(launch: Operation, ks: list[K.KernelOp], inner: bool) -> _Run | None:
    first = row_choices(ks[0], inner)
    common = [r for r in first if all(r in row_choices(k, inner) for k in ks[1:])]
    states = {r: RowAlignment(r) for r in common}
    choices = {r: state for r, state in states.items() if state.add(ks)}
    return _Run([launch], ks, choices, inner) if choices else None


def _privatized(run: _Run, launch: Operation, ks: list[K.KernelOp]) -> _Run | None:
    """`run` extended by `launch`, whose kernels that do not fit are [1] kernels (step
    counters) that may run once per row (`row_private`); else None."""
    one = next((r for r in run.choices if len(r) == 1), None)
    unfit = [k for k in ks if one not in row_choices(k, run.inner)]
    if one is None or not unfit or not all(scalar_kernel(k) for k in unfit):
        return None  # (the cheap test first: this runs wherever a run meets a launch)
    rest = [k for k in ks if k not in unfit]
    if rest and run.extended(launch, rest) is None:
        return None
    if not privatize([*run.kernels, *rest], one, unfit):
        return None
    return run.realigned().extended(launch, ks)


def _split(run: _Run, launch: Operation, ks: list[K.KernelOp]) -> _Run | None:
    """`run` extended by `launch`, whose kernels that do not fit run over a flat first
    dim that is the run's rows times a column count (a linear layer on [B, T, C] runs
    over [B*T]), split into the rows and that count (`kernel_domain.split_first`);
    else None."""
    for r in run.choices:
        new = [k if r in row_choices(k, run.inner) else _split_kernel(k, r) for k in ks]
        made = [k for k, old in zip(new, ks) if k is not None and k is not old]
        grown = None
        if made and None not in new:
            fresh = run.realigned()
            fresh.choices = {r: fresh.choices[r]} if r in fresh.choices else {}
            grown = fresh.extended(launch, new) if fresh.choices else None  # type: ignore[arg-type]
        if grown is None:
            for k in made:
                k.erase()  # (a copy uses the buffers)
            continue
        for old, k in zip(ks, new):
            if k is not old:
                block = old.parent_block()
                assert block is not None and k is not None
                block.insert_op_before(k, old)
                block.erase_op(old)
        if launch in ks:  # (a launch that is one kernel is that kernel)
            grown.launches[-1] = new[0]  # type: ignore[assignment]
        return grown
    return None


def _split_kernel(k: K.KernelOp, rows: Rows) -> K.KernelOp | None:
    """A copy of `k` over [*rows, T] instead of its flat first dim [rows * T], or None."""
    n, size = prod(rows), k.domain_sizes[0] if k.num_parallel else 0
    if len(rows) != 1 or size <= n or size % n:
        return None
    return split_first(k, (*rows, size // n))


def fuse_rows(block: Block, depth: int = 0) -> int:
    """Forms the `kernel.rows` ops of `block` and of the loops in it; returns how many.
    `depth` counts the loops around `block`: in a loop inside the training loop (a
    recurrence's time steps), where each launch is paid once per step, a row may be
    any leading part of a kernel's dims (fewer, wider rows: a batch row of an LSTM)."""
    made = 0
    run: _Run | None = None
    for op in list(block.ops):
        if isinstance(op, K.ForOp):  # (a run ends here, before the loop's own runs)
            made += _flush(run)
            run = None
            made += fuse_rows(op.body.block, depth + 1)
            continue
        if isinstance(op, K.AllocOp):
            continue
        ks = _kernels(op)
        grown = run.extended(op, ks) if run is not None and ks is not None else None
        if grown is None and run is not None and ks is not None:
            grown = _privatized(run, op, ks)
        if grown is None and run is not None and ks is not None:
            grown = _split(run, op, ks)
        if grown is not None:
            run = grown
            continue
        part = [
            k for k in ks or [] if run and any(r in row_choices(k, run.inner) for r in run.choices)
        ]
        if run is not None and part and len(part) < len(ks):  # type: ignore[arg-type]
            grown = run.extended(op, part)  # the kernels of a group that fit end the run,
            if grown is not None:  # where a row is more than a point of each kernel
                grown.choices = {
                    r: state
                    for r, state in grown.choices.items()
                    if all(len(r) < k.num_parallel for k in grown.kernels)
                }
            if grown is not None and grown.choices:
                made += _flush(grown)
                run = None
                continue
        made += _flush(run)
        run = _start(op, ks, depth >= 2) if ks is not None else None
    return made + _flush(run)


def _busy_threads(kernels: list[K.KernelOp], rows: Rows) -> tuple[int, int]:
    """How to rank a run's choices of rows: the threads its widest phase keeps busy on a
    GPU (one block per row, at most `MAX_BLOCK` threads each), then fewer rows."""
    widest = max(prod(k.domain_sizes[len(rows) : k.num_parallel]) for k in kernels)
    return prod(rows) * min(widest, MAX_BLOCK), -len(rows)


def _flush(run: _Run | None) -> int:
    """Replaces a run of two launches or more by one `kernel.rows` at its last launch."""
    if run is None or len(run.launches) < 2:
        return 0
    rows = max(run.choices, key=lambda r: _busy_threads(run.kernels, r))
    last = run.launches[-1]
    block = last.parent_block()
    assert block is not None
    name = "r" + run.kernels[0].sym_name.data.lstrip("k")
    fused = RowsOp(name, rows, [])
    fused.location = run.kernels[0].location
    block.insert_op_before(fused, last)
    for k in run.kernels:
        k.detach()
        fused.body.block.add_op(k)
    for launch in run.launches:
        if not isinstance(launch, K.GroupOp):
            continue
        left = list(launch.body.block.ops)  # a group the run took part of keeps the rest,
        if len(left) == 1:  # launched after the run (they were independent of that part)
            left[0].detach()
            block.insert_op_before(left[0], launch)
        if len(left) < 2:
            launch.detach()
            launch.erase()
    return 1


@dataclass(frozen=True)
class KernelFuseRowsPass(ModulePass):
    """Fuses runs of row-wise kernels into `kernel.rows` launches.

    `ir-opt model.tg -p kernels,kernel-fuse-rows -t kernels`
    """

    name = "kernel-fuse-rows"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.ops:
            if isinstance(f, func.FuncOp) and f.body.blocks:
                fuse_rows(f.body.block)
