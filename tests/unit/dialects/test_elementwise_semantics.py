"""Every row of `tg_elementwise.SEMANTICS` on every backend: the op and its gradient
(`tg.grad`) on the reference interpreter, the kernel-NumPy runner, the lowered
interpreter (after the default and the cuda pipelines) and the c backend, against
float64 NumPy and central differences; the CUDA source compiles with nvcc. A new
table row is tested here with no new test code.

    %y = tg.log1p %x : tensor<3x5xf32>
    %g = tg.grad %y wrt %x : tensor<3x5xf32>    // 1 / (1 + x), on every backend
"""

from __future__ import annotations

import numpy as np
import pytest
from compiled import needs_nvcc, nvcc_errors

from gradfuse.backend import compile_module
from gradfuse.backend.cuda.compiler import cuda_source
from gradfuse.dialects.tg_elementwise import SEMANTICS, BinaryOp
from gradfuse.frontend.parser import parse_tg
from gradfuse.passes import run_pipeline

OPS = sorted(SEMANTICS, key=lambda op: op.name)
SHAPE = (3, 5)
T = "tensor<3x5xf32>"
RNG = np.random.default_rng(7)
X = RNG.uniform(0.5, 2.0, SHAPE).astype(np.float32)  # in every op's domain, no ties
Y = RNG.uniform(0.5, 2.0, SHAPE).astype(np.float32)


def program(op: type) -> str:
    """The op on `%x` (and `%y`), its result and the gradient of its sum wrt `%x`."""
    binary = issubclass(op, BinaryOp)
    args = f"%x: {T}, %y: {T}" if binary else f"%x: {T}"
    operands = "%x, %y" if binary else "%x"
    return f"""func @main({args}) -> ({T}, {T}) {{
  %z = {op.name} {operands} : {T}
  %s = tg.reduce_sum %z dims=[0, 1] : tensor<f32>
  %g = tg.grad %s wrt %x : {T}
  return %z, %g
}}"""


def expected(op: type) -> tuple[np.ndarray, np.ndarray]:
    """The op in float64 and its derivative in x by central differences."""
    f = SEMANTICS[op].numpy
    x, y = X.astype(np.float64), Y.astype(np.float64)
    args = (y,) if issubclass(op, BinaryOp) else ()
    h = 1e-6
    return f(x, *args), (f(x + h, *args) - f(x - h, *args)) / (2 * h)


def inputs(op: type) -> list[np.ndarray]:
    return [X, Y] if issubclass(op, BinaryOp) else [X]


# float32 math functions are within a few ulps (glibc's, NumPy's, CUDA's --use_fast_math
# aside); the difference quotient of the float64 function is good to about 1e-9.
RTOL, ATOL = 2e-6, 1e-6


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.parametrize(
    "backend, pipeline",
    [("reference", None), ("numpy", None), ("lowered", None), ("lowered", "cuda"), ("c", None)],
    ids=["reference", "numpy", "lowered", "lowered-cuda", "c"],
)
def test_every_row_on_every_backend(op: type, backend: str, pipeline: str | None) -> None:
    value, grad = expected(op)
    run = compile_module(parse_tg(program(op)), backend, pipeline=pipeline).run(args=inputs(op))
    z, g = run.results
    np.testing.assert_allclose(z, value, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(g, grad, rtol=RTOL, atol=ATOL)


@needs_nvcc
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_every_row_compiles_as_cuda(op: type) -> None:
    module = parse_tg(program(op))
    run_pipeline(module, "cuda")
    source = cuda_source(module)
    c = SEMANTICS[op].c
    assert c is None or f"{c}(" in source
    assert nvcc_errors(source) is None


TORCH = {  # the row's op as PyTorch code, on gradfuse's Tensor and on torch.Tensor
    "tg.add": lambda a, b: a + b, "tg.sub": lambda a, b: a - b, "tg.mul": lambda a, b: a * b,
    "tg.div": lambda a, b: a / b, "tg.max": lambda a, b: a.maximum(b), "tg.neg": lambda a: -a,
    "tg.exp2": lambda a: a.exp2(), "tg.expm1": lambda a: a.expm1(), "tg.log2": lambda a: a.log2(),
    "tg.log1p": lambda a: a.log1p(), "tg.sqrt": lambda a: a.sqrt(),
    "tg.recip": lambda a: a.reciprocal(), "tg.sin": lambda a: a.sin(), "tg.erf": lambda a: a.erf(),
    "tg.atan2": lambda a, b: a.atan2(b),
}  # fmt: skip


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_tensor_methods_agree_with_torch(op: type) -> None:
    """Each row written as PyTorch code on gradfuse Tensors records the op and computes
    what torch computes, gradient included."""
    torch = pytest.importorskip("torch")
    import gradfuse
    from gradfuse import Feeder, Parameter, Receiver

    gradfuse.reset()
    w = Parameter(X.copy(), name="w")
    rest = [Feeder(lambda: Y, shape=list(SHAPE), name="y")][: len(inputs(op)) - 1]
    out: list = []
    z = TORCH[op.name](w, *rest)
    Receiver(out.append, z)
    z.sum().backward()
    Receiver(out.append, w.grad)
    assert f"= {op.name} " in gradfuse.ir_text()
    gradfuse.execute("reference")
    tw = torch.tensor(X, requires_grad=True)
    tz = TORCH[op.name](tw, *map(torch.from_numpy, inputs(op)[1:]))
    tz.sum().backward()
    np.testing.assert_allclose(out[0], tz.detach().numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out[1], tw.grad.numpy(), rtol=RTOL, atol=ATOL)
