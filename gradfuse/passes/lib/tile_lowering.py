"""Lowering of a contraction marked by `kernel-tile` to a shared-memory tiled `gpu.func`.

One block of TM x TN threads per output tile (and per point of the outer parallel
dims); thread (ty, tx) computes output (m, n) = (bm * TM + ty, bn * TN + tx). The
reduction runs in chunks of TK (its dims linearised): each chunk, the block's threads
stage the reads that move with the reduction, those that depend on m in a TM x TK
tile, on n in a TK x TN tile, on neither in a TK vector, all in workgroup memory
(zero outside the domain), then wait at a barrier, then each thread accumulates TK
steps from the tiles, then all wait again before the next chunk overwrites them:

```
gpu.func @k0(%x: memref<64x32xf32>, %w: memref<64x32xf32>, %h: memref<64x64xf32>) kernel {
  %a = memref.alloca() : memref<16x16xf32, 3 : i64>      // x[m, k] for the block's m
  %b = memref.alloca() : memref<16x16xf32, 3 : i64>      // w[n, k] for the block's n
  %s = scf.for %kc = %c0 to %c2 step %c1 iter_args(%acc = %zero) -> (f32) {
    ... memref.store (x at m = bm * 16 + tid / 16, k = kc * 16 + tid % 16), %a[...]
    ... memref.store (w at n = bn * 16 + tid % 16, ...), %b[...]
    gpu.barrier
    %t = scf.for %kk = %c0 to %c16 step %c1 iter_args(%u = %acc) -> (f32) {
      %p = arith.mulf (memref.load %a[%ty, %kk]), (memref.load %b[%kk, %tx]) : f32
      ... %u + %p where kc * 16 + kk < 32, else %u ...
    }
    gpu.barrier
    scf.yield %t : f32
  }
  scf.if (%m < 64 and %n < 64) { ... the epilogue, memref.store %s, %h[%m, %n] ... }
}
```

Reads that do not move with the reduction are read directly, at the output point
(clamped into the domain for the threads past its edge, which store nothing).
"""

from __future__ import annotations

from math import prod

from xdsl.dialects import arith, gpu
from xdsl.ir import Block, SSAValue

from gradfuse.dialects import kernel as kd
from gradfuse.passes.kernel.tile import TILE_ATTR, load_dims
from gradfuse.passes.lib import fast_ops as fast
from gradfuse.passes.lib.gpu_func import func_frame, kernel_func
from gradfuse.passes.lib.kernel_lowering import KernelBuilder, combine


def tile_sizes(k: kd.KernelOp) -> tuple[int, ...] | None:
    """(TM, TN, TK, m dim, n dim) of a kernel that `kernel-tile` marked, else None."""
    attr = k.attributes.get(TILE_ATTR)
    if attr is None:
        return None
    return tuple(int(v) for v in attr.iter_values())  # type: ignore[attr-defined]


class TileBuilder(KernelBuilder):
    """Builds the body of a tiled contraction (see the module docstring)."""

    def lower_tiled(self, k: kd.KernelOp, args: dict[SSAValue, SSAValue]) -> tuple[int, int]:
        """Fills the entry block; returns (blocks, threads per block)."""
        tm, tn, tk, self.mdim, self.ndim = tile_sizes(k)  # type: ignore[misc]
        self.k, self.loc, self.args = k, k.location, args
        sizes, npar = k.domain_sizes, k.num_parallel
        self.big_m, self.big_n = sizes[self.mdim], sizes[self.ndim]
        self.red, self.npar = sizes[npar:], npar
        self.big_k, self.tm, self.tn, self.tk = prod(self.red), tm, tn, tk
        self.outer_dims = [d for d in range(npar) if d not in (self.mdim, self.ndim)]
        outer = [sizes[d] for d in self.outer_dims]
        grid = [*outer, -(-self.big_m // tm), -(-self.big_n // tn)]
        tid = self.thread_id()
        bid = self.add(fast.gpu_index(gpu.BlockIdOp))
        self.tid = tid
        *self.outer, bm, bn = self.delinearize(bid, grid, self.loc)
        self.ty, self.tx = self.delinearize(tid, [tm, tn], self.loc)
        self.m0 = self.mul(bm, tm)
        self.n0 = self.mul(bn, tn)
        m = self.add(fast.index_op(arith.AddiOp, self.m0, self.ty, flags=True), self.loc)
        n = self.add(fast.index_op(arith.AddiOp, self.n0, self.tx, flags=True), self.loc)
        prologue, reds, epilogue = k.phases()
        self.tiles = self.stage_plan(prologue)
        inits = [self._init(r) for r in reds]
        chunks = self.const(-(-self.big_k // tk))
        with self.counted_loop(chunks, inits, self.loc) as (body, loop):
            self.stage(body.args[0])
            self.add(gpu.BarrierOp(), self.loc)
            point = self.place(self.clamp(m, self.big_m), self.clamp(n, self.big_n))
            done = self.accumulate(body.args[0], list(body.args[1:]), prologue, reds, point)
            self.add(gpu.BarrierOp(), self.loc)
            self.add(fast.scf_yield(*done))
        inside = self.add(
            arith.AndIOp(self.less(m, self.big_m), self.less(n, self.big_n)), self.loc
        )
        with self.if_then(inside, self.loc):
            vm = self.values()
            vm.update((r.result, v) for r, v in zip(reds, loop.results))
            for op in epilogue:
                self.lower_op(op, k, vm, self.place(m, n))
        self.add(gpu.ReturnOp.create())
        return prod(grid), tm * tn

    # --- small helpers ---------------------------------------------------------------

    def mul(self, v: SSAValue, c: int) -> SSAValue:
        return self.add(fast.index_op(arith.MuliOp, v, self.const(c), flags=True), self.loc)

    def less(self, v: SSAValue, bound: int) -> SSAValue:
        return self.add(fast.cmpi(v, self.const(bound), "ult"), self.loc)

    def clamp(self, v: SSAValue, size: int) -> SSAValue:
        """`v`, or the last index `size - 1` past it (a read that is never used)."""
        return self.add(fast.select(self.less(v, size), v, self.const(size - 1)), self.loc)

    def values(self) -> dict[SSAValue, SSAValue]:
        return {a: self.args[a] for a in self.k.buffer_args}

    def place(self, m: SSAValue, n: SSAValue) -> list[SSAValue]:
        """The parallel indices of the block's outer point with output (m, n)."""
        point = [m] * self.npar
        for d, v in zip(self.outer_dims, self.outer):
            point[d] = v
        point[self.mdim], point[self.ndim] = m, n
        return point

    def point(self, m: SSAValue, n: SSAValue, kk: SSAValue) -> list[SSAValue]:
        """The domain point at output (m, n) and linear reduction index kk (clamped)."""
        red = self.delinearize(self.clamp(kk, self.big_k), self.red, self.loc)
        return [*self.place(m, n), *red]

    # --- staging ---------------------------------------------------------------------

    def stage_plan(self, prologue: list) -> dict[kd.LoadOp, tuple[str, SSAValue]]:
        """A workgroup tile for each read that moves with the reduction: "m", "n" or "k"."""
        plan: dict[kd.LoadOp, tuple[str, SSAValue]] = {}
        reduced = set(range(self.npar, self.npar + len(self.red)))
        for op in prologue:
            if not isinstance(op, kd.LoadOp) or not load_dims(op) & reduced:
                continue
            dims = load_dims(op)
            side = "m" if self.mdim in dims else "n" if self.ndim in dims else "k"
            shape = {"m": [self.tm, self.tk], "n": [self.tk, self.tn], "k": [self.tk]}[side]
            alloca = fast.workgroup_alloca(op.result.type, shape)
            alloca.location = op.location
            self.hoist(alloca)
            plan[op] = (side, alloca.memref)
        return plan

    def stage(self, kc: SSAValue) -> None:
        """Every thread stores its share of each tile for chunk `kc` (0 outside)."""
        k0 = self.mul(kc, self.tk)
        threads = self.tm * self.tn
        for op, (side, tile) in self.tiles.items():
            rows, cols = {"m": (self.tm, self.tk), "n": (self.tk, self.tn), "k": (1, self.tk)}[side]
            for j in range(-(-rows * cols // threads)):
                e = self.add(
                    fast.index_op(arith.AddiOp, self.tid, self.const(j * threads), flags=True),
                    self.loc,
                )
                if (j + 1) * threads <= rows * cols:  # every thread has an element
                    self.stage_element(op, side, tile, e, k0, (rows, cols))
                    continue
                outer_block, then = self.block, Block()  # the bound's constant comes after
                self.block = then
                self.stage_element(op, side, tile, e, k0, (rows, cols))
                self.add(fast.scf_yield())
                self.block = outer_block
                self.add(fast.scf_if(self.less(e, rows * cols), then, None), self.loc)

    def stage_element(
        self,
        op: kd.LoadOp,
        side: str,
        tile: SSAValue,
        e: SSAValue,
        k0: SSAValue,
        shape: tuple[int, int],
    ) -> None:
        """Element `e` of `op`'s tile (of `shape`) for the chunk at reduction index `k0`."""
        zero = self.const(0)
        r, c = self.delinearize(e, list(shape), self.loc)
        if side == "m":
            mm = self.add(fast.index_op(arith.AddiOp, self.m0, r, flags=True), self.loc)
            kk = self.add(fast.index_op(arith.AddiOp, k0, c, flags=True), self.loc)
            valid = self.add(
                arith.AndIOp(self.less(mm, self.big_m), self.less(kk, self.big_k)), self.loc
            )
            point, at = self.point(self.clamp(mm, self.big_m), zero, kk), [r, c]
        elif side == "n":
            nn = self.add(fast.index_op(arith.AddiOp, self.n0, c, flags=True), self.loc)
            kk = self.add(fast.index_op(arith.AddiOp, k0, r, flags=True), self.loc)
            valid = self.add(
                arith.AndIOp(self.less(nn, self.big_n), self.less(kk, self.big_k)), self.loc
            )
            point, at = self.point(zero, self.clamp(nn, self.big_n), kk), [r, c]
        else:
            kk = self.add(fast.index_op(arith.AddiOp, k0, c, flags=True), self.loc)
            valid = self.less(kk, self.big_k)
            point, at = self.point(zero, zero, kk), [c]
        vm = self.values()
        self.lower_op(op, self.k, vm, point)
        value = self.add(
            fast.select(valid, vm[op.result], self.const(0.0, op.result.type)), self.loc
        )
        self.add(fast.store(value, tile, at), self.loc)

    def accumulate(
        self,
        kc: SSAValue,
        accs: list[SSAValue],
        prologue: list,
        reds: list[kd.ReduceOp],
        point: list[SSAValue],
    ) -> list[SSAValue]:
        """The TK steps of chunk `kc`: the prologue with staged reads from the tiles."""
        with self.counted_loop(self.tk, accs, self.loc) as (body, loop):
            kk = body.args[0]
            k0 = self.mul(kc, self.tk)
            kg = self.add(fast.index_op(arith.AddiOp, k0, kk, flags=True), self.loc)
            here = [*point, *self.delinearize(self.clamp(kg, self.big_k), self.red, self.loc)]
            vm = self.values()
            for op in prologue:
                staged = self.tiles.get(op) if isinstance(op, kd.LoadOp) else None
                if staged is None:
                    self.lower_op(op, self.k, vm, here)
                    continue
                side, tile = staged
                at = {"m": [self.ty, kk], "n": [kk, self.tx], "k": [kk]}[side]
                vm[op.result] = self.add(fast.load(tile, at), op.location)
            valid = self.less(kg, self.big_k)
            new = []
            for r, acc in zip(reds, body.args[1:]):
                step = self.add(combine(r.kind.data, acc, vm[r.value]), r.location)
                new.append(self.add(fast.select(valid, step, acc), r.location))
            self.add(fast.scf_yield(*new))
        return list(loop.results)


def build_tiled_func(
    name: str, k: kd.KernelOp
) -> tuple[gpu.FuncOp, list[SSAValue], tuple[int, int]]:
    """The tiled `gpu.func` of a marked contraction, its host buffers and launch shape."""
    host, entry, args = func_frame([k])
    blocks, threads = TileBuilder(entry).lower_tiled(k, args)
    return kernel_func(name, entry, "tiled", blocks * threads, k.location), host, (blocks, threads)
