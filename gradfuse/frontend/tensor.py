"""`Tensor`, the tracer of the Python API, and `Parameter`, named persistent state.

A `Tensor` holds one SSA value (its shape and element type come from the value's
type); every operation on it records tg ops into the current program:

    y = (x @ w.T + b).sigmoid()    # tg.permute, tg.dot, tg.reshape, tg.broadcast,
                                   # tg.add, tg.sigmoid
    y.backward()                   # tg.grad %y wrt <the params y depends on>
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import Float32Type, TensorType
from xdsl.ir import Operation, SSAValue

from gradfuse.dialects import tg
from gradfuse.dialects.tg_base import shape_of, tensor
from gradfuse.dialects.tg_builder import element_type
from gradfuse.frontend import tensor_backward as backward_
from gradfuse.frontend import tensor_cumulative as cumulative_
from gradfuse.frontend import tensor_index as index_
from gradfuse.frontend import tensor_linalg as L
from gradfuse.frontend import tensor_masks as K
from gradfuse.frontend import tensor_math as A
from gradfuse.frontend import tensor_methods as M
from gradfuse.frontend import tensor_reduce as reduce_
from gradfuse.frontend import tensor_shape as shape_
from gradfuse.frontend import tensor_sort as sort_
from gradfuse.frontend.device import default_device, device
from gradfuse.frontend.dtypes import numpy_dtype
from gradfuse.frontend.recorder import RECORDING as B
from gradfuse.frontend.recorder import emit, error
from gradfuse.frontend.tensor_shape import dims_arg

Scalar = float | int


def _operand(x: object) -> SSAValue | Scalar:
    if isinstance(x, Tensor):
        return x.value
    if isinstance(x, bool | np.bool_) or not isinstance(x, int | float | np.integer | np.floating):
        raise error(f"expected a Tensor or a Python number, got {type(x).__name__}")
    return float(x)


F32 = Float32Type()


def _binary(cls: type[Operation], reflected: bool = False) -> Callable[[Tensor, object], Tensor]:
    """A `Tensor` operator that records the elementwise op `cls` on `self` and a tensor or
    number: `__sub__ = _binary(tg.SubOp)` is `self - other`, with `reflected` `other - self`."""

    def method(self: Tensor, other: object) -> Tensor:
        x, y = K.promoted(self.value, _operand(other), arithmetic=True)
        return Tensor(B.binary(cls, y, x) if reflected else B.binary(cls, x, y))

    return method


def _unary(cls: type[Operation], doc: str) -> Callable[[Tensor], Tensor]:
    """A `Tensor` method that records the elementwise op `cls` on `self`:
    `exp2 = _unary(tg.Exp2Op, "...")` makes `x.exp2()` record `tg.exp2`."""

    def method(self: Tensor) -> Tensor:
        return Tensor(B.unary(cls, self.value))

    method.__doc__ = doc
    return method


class Tensor:
    """A traced tensor: one SSA value in the recorded program.

    `(x * 2.0).sum()` records `tg.constant`, `tg.mul` and `tg.reduce_sum`.
    """

    __slots__ = ("_value", "_leaf")
    LEAF: ClassVar[Callable[[np.ndarray], Tensor] | None] = None
    """Makes a trainable leaf of a host value: `Parameter`, set where it is defined."""

    def __init__(self, value: SSAValue):
        self._value = value
        self._leaf: Tensor | None = None  # after requires_grad_(): the Parameter it reads

    @staticmethod
    def _new(value: SSAValue) -> Tensor:
        """A `Tensor` of a recorded value (a `Parameter`'s methods make plain tensors too)."""
        return Tensor(value)

    @staticmethod
    def _operand(x: object) -> SSAValue | Scalar:
        """A tensor's value or a number (else an error), for the method modules."""
        return _operand(x)

    @staticmethod
    def _where(cond: Tensor, a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
        """`gradfuse.where`, for the method modules that cannot import this one."""
        return where(cond, a, b)

    @property
    def value(self) -> SSAValue:
        """The SSA value this tensor stands for."""
        return self._value if self._leaf is None else self._leaf.value

    # --- type ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The static shape, e.g. `(2, 255)`."""
        return shape_of(self.value)

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The element type as a NumPy dtype (`bool` for masks)."""
        ty = self.value.type
        assert isinstance(ty, TensorType)
        return numpy_dtype(ty.element_type)

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or the size of one dim (PyTorch's `size`)."""
        return self.shape if dim is None else self.shape[dim]

    @property
    def device(self) -> device:
        """Where the program runs by default (`execute()` chooses): a GPU, else the CPU."""
        return default_device()

    @property
    def is_cuda(self) -> bool:
        """Whether the program runs on a GPU by default (`execute()` chooses)."""
        return self.device.type == "cuda"

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    __array_ufunc__ = None  # `array * tensor` calls Tensor.__rmul__ (and says what is wrong)

    def __len__(self) -> int:
        if not self.shape:
            raise error("len() of a rank-0 tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        raise error(
            "a traced Tensor has no value while the program is recorded: use gradfuse.where"
            " for data-dependent choices"
        )

    def __repr__(self) -> str:
        return f"Tensor(shape={list(self.shape)}, dtype={self.dtype})"

    # --- arithmetic ---------------------------------------------------------------------

    __add__ = _binary(tg.AddOp)
    __radd__ = _binary(tg.AddOp, reflected=True)
    __sub__ = _binary(tg.SubOp)
    __rsub__ = _binary(tg.SubOp, reflected=True)
    __mul__ = _binary(tg.MulOp)
    __rmul__ = _binary(tg.MulOp, reflected=True)

    def __truediv__(self, other: object) -> Tensor:
        o = _operand(other)
        if not isinstance(o, SSAValue) and o != 0:
            return Tensor(B.binary(tg.MulOp, self.value, 1.0 / o))
        return Tensor(B.binary(tg.DivOp, self.value, o))

    __rtruediv__ = _binary(tg.DivOp, reflected=True)

    def __neg__(self) -> Tensor:
        return Tensor(B.unary(tg.NegOp, self.value))

    def __pos__(self) -> Tensor:
        return self

    def __pow__(self, exponent: object) -> Tensor:
        if isinstance(exponent, Tensor):
            return M.pow_tensor(self, exponent)
        if isinstance(exponent, bool) or not isinstance(exponent, int | float):
            raise error("tensor ** exponent: the exponent must be a number or a tensor")
        p = float(exponent)
        if p == 0:
            return Tensor(B.const(1.0, tensor(self.shape, element_type(self.value))))
        if p < 0:
            return (self ** (-p)).reciprocal()
        if p == 0.5:
            return self.sqrt()
        if p.is_integer() and p <= 4:
            out: Tensor = self
            for _ in range(int(p) - 1):
                out = out * self
            return out
        return (self.log2() * p).exp2()

    pow = __pow__

    def __matmul__(self, other: Tensor) -> Tensor:
        return Tensor(B.matmul(self.value, other.value))

    def __rmatmul__(self, other: Tensor) -> Tensor:
        return Tensor(B.matmul(other.value, self.value))

    def matmul(self, other: Tensor) -> Tensor:
        """`self @ other`."""
        return self @ other

    # --- comparisons (masks: tensor_masks.py) and named methods (tensor_methods.py) -------

    __lt__, __gt__, __le__, __ge__ = K.lt_, K.gt_, K.le_, K.ge_
    __eq__, __ne__ = K.eq_, K.ne_  # type: ignore[assignment]
    eq, ne, gt, ge, lt, le = K.eq, K.ne, K.gt, K.ge, K.lt, K.le
    isnan, isinf, isfinite = K.isnan, K.isinf, K.isfinite
    add, sub, mul, div, neg, square, cos, mm, bmm = (
        M.add, M.sub, M.mul, M.div, M.neg, M.square, M.cos, M.mm, M.bmm
    )  # fmt: skip
    __rpow__, item, requires_grad_ = M.rpow, M.item, M.requires_grad_
    grad = property(M.leaf_grad, M.set_leaf_grad)
    numpy, tolist, __format__ = M.numpy, M.tolist, M.format_
    __float__ = M.item
    __invert__, __and__, __or__ = K.logical_not, K.logical_and, K.logical_or
    logical_not, logical_and, logical_or = K.logical_not, K.logical_and, K.logical_or
    view_as, reshape_as, expand_as, new_zeros, new_ones, new_full = (
        M.view_as, M.reshape_as, M.expand_as, M.new_zeros, M.new_ones, M.new_full
    )  # fmt: skip
    to, type, double, half, type_as = M.to, M.type_, M.double, M.half, M.type_as
    round, floor, ceil, trunc, long = M.round_, M.floor, M.ceil, M.trunc, M.long
    int = M.long
    cpu = cuda = clone = M.same
    add_, sub_, mul_, div_, copy_, fill_, zero_, clamp_ = (
        M.add_, M.sub_, M.mul_, M.div_, M.copy_, M.fill_, M.zero_, M.clamp_
    )  # fmt: skip
    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_  # in place, as torch's

    def _set(self, new: Tensor, what: str) -> None:
        """An in-place update (`add_`, `zero_`, ...): this tensor now stands for `new`."""
        if self._leaf is not None:
            return self._leaf._set(new, what)
        self._value = new.value

    __hash__ = object.__hash__  # a tracer is hashed by identity, as torch.Tensor is

    def float(self) -> Tensor:
        """A mask as 0.0 / 1.0 (f32)."""
        return Tensor(B.cast(self.value, Float32Type()))

    # --- elementwise functions ------------------------------------------------------------

    exp2 = _unary(tg.Exp2Op, "`2 ** self` (`tg.exp2`).")
    log2 = _unary(tg.Log2Op, "`log2(self)` (`tg.log2`).")

    expm1 = _unary(tg.Expm1Op, "`e ** self - 1` (`tg.expm1`), exact for small `self`.")
    log1p = _unary(tg.Log1pOp, "`ln(1 + self)` (`tg.log1p`), exact for small `self`.")
    sqrt = _unary(tg.SqrtOp, "`sqrt(self)` (`tg.sqrt`).")

    reciprocal = _unary(tg.RecipOp, "`1 / self` (`tg.recip`).")
    sin = _unary(tg.SinOp, "`sin(self)` (`tg.sin`).")
    exp, log, rsqrt, abs = A.exp, A.log, A.rsqrt, A.abs_

    maximum = _binary(tg.MaxOp)
    maximum.__doc__ = "Elementwise maximum (`tg.max`)."
    atan2 = arctan2 = _binary(tg.Atan2Op)
    atan2.__doc__ = "The angle of (other, self) from the x axis, in [-pi, pi] (`tg.atan2`)."

    relu = _unary(tg.ReluOp, "`max(self, 0)` (the `tg.relu` composite).")
    sigmoid = _unary(tg.SigmoidOp, "`1 / (1 + exp(-self))` (the `tg.sigmoid` composite).")
    tanh = _unary(tg.TanhOp, "`tanh(self)` (the `tg.tanh` composite).")

    def softmax(self, dim: int = -1) -> Tensor:
        """Softmax along `dim` (the `tg.softmax` composite)."""
        d = B.normalize_dims(dim, self.ndim, "tg.softmax")[0]
        return Tensor(emit(tg.SoftmaxOp(self.value, d)).result)

    def log_softmax(self, dim: int = -1) -> Tensor:
        """`x - max - log(sum(exp(x - max)))` along `dim`; the max is detached (the result
        does not change with it, so its gradient is 0: no passes to compute that)."""
        shifted = self - self.amax(dim, keepdim=True).detach()
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    erf = _unary(tg.ErfOp, "The error function (`tg.erf`).")

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """`torch.gather` along `dim` (`tg.gather`); `index` holds integers as floats."""
        d = B.normalize_dims(dim, self.ndim, "tg.gather")[0]
        return Tensor(emit(tg.GatherOp(self.value, index.value, d)).result)

    # --- reductions (gradfuse/frontend/tensor_reduce.py) ---------------------------------

    sum, mean, std_mean, var_mean = reduce_.sum_, reduce_.mean, reduce_.std_mean, reduce_.var_mean
    max, min = reduce_.max_, reduce_.min_
    amax, amin, argmax, argmin = reduce_.amax, reduce_.amin, reduce_.argmax, reduce_.argmin
    clamp = clip = reduce_.clamp
    var, std, norm, topk = reduce_.var, reduce_.std, reduce_.norm, reduce_.topk
    sort, argsort, msort = sort_.sort, sort_.argsort, sort_.msort
    cumsum, cumprod, prod = cumulative_.cumsum, cumulative_.cumprod, cumulative_.prod
    logcumsumexp, median = cumulative_.logcumsumexp, sort_.median
    flip, roll = cumulative_.flip, cumulative_.roll
    # elementwise composites (tensor_math.py)
    atan, asin, acos, tan, sinh, cosh, asinh, acosh, atanh = (
        A.atan, A.asin, A.acos, A.tan, A.sinh, A.cosh, A.asinh, A.acosh, A.atanh
    )  # fmt: skip
    arctan, arcsin, arccos, arcsinh, arccosh, arctanh = atan, asin, acos, asinh, acosh, atanh
    logsumexp, logaddexp, hypot, xlogy = A.logsumexp, A.logaddexp, A.hypot, A.xlogy
    remainder, fmod, floor_divide, frac, sign = A.remainder, A.fmod, A.floor_divide, A.frac, A.sign
    __mod__, __rmod__, __floordiv__, __rfloordiv__ = remainder, A.rremainder, floor_divide, A.rfloor_divide  # fmt: skip
    lerp, addcmul, addcdiv, clamp_min, clamp_max = A.lerp, A.addcmul, A.addcdiv, A.clamp_min, A.clamp_max  # fmt: skip
    nan_to_num, sgn, true_divide = A.nan_to_num, A.sign, M.div
    # products, diagonals, index selections (tensor_linalg.py)
    outer = ger = L.outer
    dot, inner, mv, addmm, addmv, baddbmm, addbmm = L.dot, L.dot, L.mv, L.addmm, L.addmv, L.baddbmm, L.addbmm  # fmt: skip
    kron, cross, diagonal, diag, trace, triu, tril = L.kron, L.cross, L.diagonal, L.diag, L.trace, L.triu, L.tril  # fmt: skip
    index_select, take_along_dim, scatter_add, index_add = L.index_select, L.take_along_dim, L.scatter_add, L.index_add  # fmt: skip
    repeat_interleave, scatter, scatter_ = L.repeat_interleave, L.scatter, L.scatter_
    scatter_add_, index_add_ = L.scatter_add_, L.index_add_

    def detach(self) -> Tensor:
        """The same values, through which no gradient flows (`tg.stop_gradient`), as in
        PyTorch: `net_d(fake.detach())` trains the discriminator, not the generator."""
        return Tensor(B.unary(tg.StopGradientOp, self.value))

    @property
    def data(self) -> Tensor:
        """`detach()`, as PyTorch's `.data` of a computed tensor (`w.grad.data`); a
        `Parameter`'s is its host array."""
        return self.detach()

    # --- movement -------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """Same elements in a new shape; one dim may be -1 (`tg.reshape`)."""
        return Tensor(B.reshape(self.value, list(dims_arg(shape))))

    view = reshape

    def permute(self, *dims: int | Sequence[int]) -> Tensor:
        """Reorders dims: result dim i is dim `dims[i]` (`tg.permute`)."""
        return Tensor(B.permute(self.value, list(dims_arg(dims))))

    def transpose(self, d0: int, d1: int) -> Tensor:
        """Swaps two dims."""
        return Tensor(B.transpose(self.value, d0, d1))

    @property
    def T(self) -> Tensor:
        """All dims reversed (the transpose of a matrix)."""
        return self.permute(list(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:  # noqa: N802 (torch's name)
        """The last two dims swapped (a batch of matrices transposed)."""
        return self.transpose(-2, -1)

    unsqueeze, squeeze, flatten = shape_.unsqueeze, shape_.squeeze, shape_.flatten
    t, expand, split, chunk = shape_.t, shape_.expand, shape_.split, shape_.chunk
    repeat = shape_.repeat

    def contiguous(self, memory_format: object = None) -> Tensor:
        """`self`: where values live in memory is the compiler's business."""
        return self

    def dim(self) -> int:
        """The number of dims (`ndim`)."""
        return self.ndim

    masked_fill, masked_select, nonzero = K.masked_fill, K.masked_select, K.nonzero

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        """Repeated to `shape` by NumPy's rules."""
        return Tensor(B.broadcast(self.value, list(shape)))

    __getitem__, __setitem__ = index_.getitem, index_.setitem

    # --- autodiff (gradfuse/frontend/tensor_backward.py) ---------------------------------

    backward = backward_.backward


def where(cond: Tensor, a: Tensor | Scalar, b: Tensor | Scalar) -> Tensor:
    """`a` where the mask `cond` holds, else `b` (`tg.where`, broadcast). `where(x > 0, x, 0.0)`"""
    return Tensor(B.where(cond.value, _operand(a), _operand(b)))
