"""TEMPORARY private evaluator until gradfuse.backend.reference lands. Delete."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, TensorType

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import ints, shape_of


class RunResult:
    def __init__(self, results, params):
        self.results = results
        self.params = params
        self.received = {}


def _dt(ty, dtype):
    assert isinstance(ty, TensorType)
    return np.bool_ if ty.element_type.name == "integer_type" else dtype


UN = {
    tg.NegOp: np.negative, tg.Exp2Op: np.exp2, tg.Log2Op: np.log2, tg.SqrtOp: np.sqrt,
    tg.RecipOp: lambda x: 1 / x, tg.SinOp: np.sin, tg.TanhOp: np.tanh,
    tg.SigmoidOp: lambda x: 1 / (1 + np.exp(-x)), tg.ReluOp: lambda x: np.maximum(x, 0),
}
BIN = {
    tg.AddOp: np.add, tg.SubOp: np.subtract, tg.MulOp: np.multiply, tg.DivOp: np.divide,
    tg.MaxOp: np.maximum, tg.CmpLtOp: np.less,
}


def _block(block, env, params, dtype):
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        if isinstance(op, tg.YieldOp):
            return [env[v] for v in op.values]
        x = [env[v] for v in op.operands]
        t = type(op)
        if t in UN:
            r = UN[t](x[0])
        elif t in BIN:
            r = BIN[t](x[0], x[1])
        elif t is tg.WhereOp:
            r = np.where(x[0], x[1], x[2])
        elif t is tg.CastOp:
            r = x[0].astype(_dt(op.result.type, dtype))
        elif t is tg.DotOp:
            r = np.matmul(x[0], x[1])
        elif t is tg.ReduceSumOp:
            r = np.sum(x[0], axis=ints(op.dims))
        elif t is tg.ReduceMaxOp:
            r = np.max(x[0], axis=ints(op.dims))
        elif t is tg.SoftmaxOp:
            d = op.dim.value.data
            e = np.exp(x[0] - x[0].max(axis=d, keepdims=True))
            r = e / e.sum(axis=d, keepdims=True)
        elif t is tg.ConstantOp:
            assert isinstance(op.value, FloatAttr)
            r = np.full(shape_of(op.result), op.value.value.data, dtype)
        elif t is tg.ReshapeOp:
            r = x[0].reshape(shape_of(op.result))
        elif t is tg.PermuteOp:
            r = np.transpose(x[0], ints(op.perm))
        elif t is tg.BroadcastOp:
            r = np.broadcast_to(x[0], shape_of(op.result))
        elif t is tg.SliceOp:
            sl = tuple(slice(a, b, c) for a, b, c in zip(ints(op.starts), ints(op.limits), ints(op.strides)))
            r = x[0][sl]
        elif t is tg.PadOp:
            r = np.pad(x[0], list(zip(ints(op.low), ints(op.high))), constant_values=op.value.value.data)
        elif t is tg.ConcatOp:
            r = np.concatenate(x, axis=op.dim.value.data)
        elif t is tg.ParamOp:
            key = op.key.data
            if key not in params:
                params[key] = np.full(shape_of(op.result), op.init.value.data, dtype)
            r = params[key]
        elif t is tg.AssignOp:
            params[op.key.data] = x[0]
            continue
        elif t is tg.ForOp:
            vals = x
            for i in range(op.lower.value.data, op.upper.value.data, op.step.value.data):
                body = op.body.block
                env2 = dict(env)
                env2[body.args[0]] = i
                for a, v in zip(body.args[1:], vals):
                    env2[a] = v
                vals = _block(body, env2, params, dtype)
            for res, v in zip(op.results, vals):
                env[res] = v
            continue
        else:
            raise NotImplementedError(op.name)
        env[op.results[0]] = np.asarray(r)


def run(module: ModuleOp, *, args=(), params=None, dtype=np.float32, **_):
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    params = dict(params or {})
    env = {a: np.asarray(v, dtype) for a, v in zip(fn.body.block.args, args)}
    return RunResult(_block(fn.body.block, env, params, dtype), params)
