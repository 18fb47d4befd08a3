"""A readable listing of a fused program, to set beside the seed's fusion listing.

Each launch shows its fusion kind, domain (parallel | reduced), the ops inside
with their access expressions, and where each op came from (file:line, module
path, forward/backward/optimizer). `ir-opt -p ... -t kernels` prints it:

    k1 contraction [2, 255 | 255]   fuses: 0 (forward) mlp.py:12, ...
      %0 = load x[d0, d2]                         mlp.py:12 0 (forward)
      %2 = mul %0, %1
      %3 = reduce add %2
      store h[d0, d1] = %7
"""

from __future__ import annotations

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from gradfuse.dialects import kernel as K
from gradfuse.provenance import provenance_of


def dump_kernels(module: ModuleOp) -> str:
    """The listing of every function of a module in the kernel dialect."""
    lines: list[str] = []
    for f in module.ops:
        if isinstance(f, func.FuncOp):
            _Dumper(lines).function(f)
    return "\n".join(lines) + "\n"


def _where(op: Operation) -> str:
    p = provenance_of(op.location)
    if p.file is None and p.module_path is None:
        return ""
    path = f"{p.module_path} " if p.module_path else ""
    return f"{path}({p.direction}) {p.source}".strip()


def _map(op: K.LoadOp | K.StoreOp | K.GatherOp | K.ScatterAddOp | K.RandomOp) -> str:
    return ", ".join(str(r) for r in op.map.data.results)


class _Dumper:
    def __init__(self, lines: list[str]):
        self.lines = lines
        self.names: dict[SSAValue, str] = {}

    def name(self, v: SSAValue) -> str:
        if v not in self.names:
            self.names[v] = v.name_hint or f"t{len(self.names)}"
        return self.names[v]

    def function(self, f: func.FuncOp) -> None:
        for op in f.body.block.ops:
            if isinstance(op, K.ParamOp):
                self.names[op.result] = op.key.data
        self.lines.append(f"func @{f.sym_name.data}")
        self.block(f.body.block.ops, 1)

    def block(self, ops, depth: int) -> None:
        pad = "  " * depth
        for op in ops:
            if isinstance(op, K.ParamOp):
                self.lines.append(f"{pad}param {op.key.data} {_shape(op.result)}")
            elif isinstance(op, K.AllocOp | K.ConstantOp):
                kind = "buffer" if isinstance(op, K.AllocOp) else "constant"
                self.lines.append(f"{pad}{kind} {self.name(op.result)} {_shape(op.result)}")
            elif isinstance(op, K.FeedOp):
                self.lines.append(f'{pad}feed "{op.key.data}" -> {self.name(op.buffer)}')
            elif isinstance(op, K.ReceiveOp):
                names = ", ".join(self.name(b) for b in op.buffers)
                self.lines.append(f'{pad}receive "{op.key.data}" <- {names}')
            elif isinstance(op, K.AllReduceOp):
                src, dst = self.name(op.source), self.name(op.target)
                self.lines.append(f"{pad}allreduce {op.reduce.data} {src} -> {dst}")
            elif isinstance(op, K.ForOp):
                lo, hi, st = op.bounds
                self.lines.append(f"{pad}for {lo} to {hi} step {st}:")
                self.block(op.body.block.ops, depth + 1)
            elif isinstance(op, K.GroupOp | K.RowsOp):
                n = len(list(op.body.block.ops))
                if isinstance(op, K.GroupOp):
                    how = f"horizontal fusion of {n} kernels"
                else:
                    how = f"{n} kernels row by row over [{', '.join(map(str, op.row_sizes))}]"
                self.lines.append(f"{pad}{op.sym_name.data}: {how}, one launch")
                for k in op.body.block.ops:
                    self.kernel(k, depth + 1)  # type: ignore[arg-type]
            elif isinstance(op, K.KernelOp):
                self.kernel(op, depth)
            elif isinstance(op, func.ReturnOp):
                self.lines.append(f"{pad}return {', '.join(self.name(v) for v in op.arguments)}")

    def kernel(self, k: K.KernelOp, depth: int) -> None:
        pad = "  " * depth
        dims, par = list(k.domain_sizes), k.num_parallel
        domain = ", ".join(map(str, dims[:par])) + (
            " | " + ", ".join(map(str, dims[par:])) if par < len(dims) else ""
        )
        origins = list(dict.fromkeys(w for op in k.body.block.ops if (w := _where(op))))
        self.lines.append(f"{pad}{k.sym_name.data} {k.kind.data} [{domain}]")
        if origins:
            self.lines.append(f"{pad}  fuses: {'; '.join(origins)}")
        outer = dict(zip(k.buffer_args, k.buffers))
        local: dict[SSAValue, str] = {a: f"d{i}" for i, a in enumerate(k.index_args)}

        def val(v: SSAValue) -> str:
            return self.name(outer[v]) if v in outer else local.get(v, "?")

        for op in k.body.block.ops:
            text = self.body_op(op, val, local)
            w = _where(op)
            self.lines.append(f"{pad}  {text:<52} {w}".rstrip())

    def body_op(self, op: Operation, val, local: dict[SSAValue, str]) -> str:
        if op.results:
            local[op.results[0]] = f"%{len(local)}"
        res = local[op.results[0]] if op.results else ""
        if isinstance(op, K.LoadOp):
            guard = ""
            if op.guard is not None:
                guard = " if " + " and ".join(str(c) for c in op.guard.data.constraints) + " else 0"
            return f"{res} = load {val(op.buffer)}[{_map(op)}]{guard}"
        if isinstance(op, K.StoreOp):
            return f"store {val(op.buffer)}[{_map(op)}] = {val(op.value)}"
        if isinstance(op, K.GatherOp):
            return f"{res} = gather {val(op.buffer)}[{_map(op)}] with s0 = {val(op.index)}"
        if isinstance(op, K.ScatterAddOp):
            where = f"{val(op.buffer)}[{_map(op)}] with s0 = {val(op.index)}"
            return f"scatter_add {where} += {val(op.value)}"
        if isinstance(op, K.RandomOp):
            return f"{res} = random[{_map(op)}] counter {val(op.counter)} seed {op.seed.value.data}"
        if isinstance(op, K.ReduceOp):
            return f"{res} = reduce {op.kind.data} {val(op.value)}"
        if isinstance(op, arith.ConstantOp):
            return f"{res} = {op.value.value.data}"  # type: ignore[attr-defined]
        name = op.name.split(".", 1)[1]
        args = ", ".join(val(o) for o in op.operands)
        return f"{res} = {name} {args}"


def _shape(v: SSAValue) -> str:
    ty = v.type
    return f"[{', '.join(map(str, ty.get_shape()))}]"  # type: ignore[attr-defined]
