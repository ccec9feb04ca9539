"""The op table: one lowering per aten op (or overload packet) that we compile.

Each lowering receives the ``GraphLowering``, the fx node (its ``meta["val"]`` gives the
result's dtype and shape, which is how torch's type promotion reaches us) and the mapped
arguments, and returns a ``TensorValue`` (or a tuple of them). Returning
``NotImplemented`` sends that one call to the aten fallback.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx

from .choices import choice
from .ir import (
    IConst,
    IExpr,
    ISym,
    IValue,
    Op,
    PointwiseNode,
    TensorRef,
    VConst,
    VExpr,
    VIndex,
    VOp,
    iadd,
    imul,
)
from .lowering import GraphLowering, Lowering
from .spatial import channels_last_pool
from .symbolic import Size, hint, is_static, to_size
from .tensorvalue import SymScalar, TensorValue, broadcast_loader, cast, index_vars, realized

__all__ = ["LOWERINGS"]

aten = torch.ops.aten
prims = torch.ops.prims
LOWERINGS: dict[object, Lowering] = {}
Fn = Callable[..., object]


def register(*ops: object) -> Callable[[Fn], Fn]:
    def deco(fn: Fn) -> Fn:
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return deco


def meta(node: torch.fx.Node) -> Any:
    return node.meta["val"]


def out_dtype(node: torch.fx.Node) -> torch.dtype:
    val = meta(node)
    if isinstance(val, list | tuple):
        val = val[0]
    dtype: torch.dtype = val.dtype
    return dtype


def out_sizes(node: torch.fx.Node) -> tuple[Size, ...]:
    return tuple(to_size(s) for s in meta(node).shape)


def size_value(n: Size, dtype: torch.dtype) -> VExpr:
    """A size (static or symbolic) as a value of ``dtype``."""
    if is_static(n):
        return VConst(float(n) if dtype.is_floating_point else n, dtype)  # type: ignore[arg-type]
    return cast(VIndex(ISym(n), torch.int64), dtype)  # type: ignore[arg-type]


def const(value: object, dtype: torch.dtype) -> TensorValue:
    v = VConst(value, dtype)  # type: ignore[arg-type]
    return TensorValue((), dtype, lambda idx: v)


def _dummy(x: object) -> object:
    if isinstance(x, TensorValue):
        return torch.empty([1] * min(x.ndim, 1), dtype=x.dtype)
    if isinstance(x, sympy.Expr):
        return 1  # a symbolic int promotes as an int
    if isinstance(x, SymScalar):
        return 1.0
    return x


def _result_type(a: Any, b: Any) -> torch.dtype:
    dt: torch.dtype = torch.result_type(a, b)
    return dt


def promote(*xs: object) -> torch.dtype:
    """torch's result type of ``xs`` (tensors by dtype and dimensionality, scalars by kind)."""
    acc: object = _dummy(xs[0])
    for x in xs[1:]:
        dt = _result_type(acc, _dummy(x))
        dims = any(isinstance(y, TensorValue) and y.ndim > 0 for y in (acc, x)) or (
            isinstance(acc, torch.Tensor) and acc.ndim > 0
        )
        tensors = isinstance(acc, torch.Tensor) or isinstance(x, TensorValue)
        acc = torch.empty([1] if dims else [], dtype=dt) if tensors else dt
    if isinstance(acc, torch.Tensor):
        return acc.dtype
    if isinstance(acc, torch.dtype):
        return acc
    return _result_type(acc, acc)


def to_tv(x: object, dtype: torch.dtype) -> TensorValue:
    if isinstance(x, TensorValue):
        return x
    if isinstance(x, bool | int | float):
        return const(x, dtype)
    if isinstance(x, sympy.Expr):
        v = size_value(x, dtype)
        return TensorValue((), dtype, lambda idx: v)
    if isinstance(x, SymScalar):
        sv = cast(x.value, dtype)
        return TensorValue((), dtype, lambda idx: sv)
    raise TypeError(f"unexpected argument {x!r}")


def pointwise(
    node: torch.fx.Node,
    inputs: Sequence[object],
    fn: Callable[[list[VExpr]], VExpr],
    compute: torch.dtype,
) -> TensorValue:
    """A lazy value: ``fn`` over the inputs, broadcast to the node's shape and converted."""
    sizes = out_sizes(node)
    dtype = out_dtype(node)
    loaders = [broadcast_loader(to_tv(x, compute), sizes) for x in inputs]

    def load(idx: Sequence[IExpr]) -> VExpr:
        return cast(fn([cast(ld(idx), compute) for ld in loaders]), dtype)

    return TensorValue(sizes, dtype, load)


def op(name: Op, dtype: torch.dtype, *args: VExpr) -> VExpr:
    return VOp(name, tuple(args), dtype)


def c(value: float, dtype: torch.dtype) -> VExpr:
    return VConst(value, dtype)


# ---------------------------------------------------------------- elementwise

_BINARY = {
    aten.mul: Op.MUL,
    aten.maximum: Op.MAXIMUM,
    aten.minimum: Op.MINIMUM,
    aten.atan2: Op.ATAN2,
    aten.bitwise_and: Op.AND,
    aten.bitwise_or: Op.OR,
    aten.bitwise_xor: Op.XOR,
    aten.logical_and: Op.LOGICAL_AND,
    aten.logical_or: Op.LOGICAL_OR,
    aten.logical_xor: Op.LOGICAL_XOR,
}
_COMPARE = {
    aten.eq: Op.EQ,
    aten.ne: Op.NE,
    aten.lt: Op.LT,
    aten.le: Op.LE,
    aten.gt: Op.GT,
    aten.ge: Op.GE,
}
# unary ops computed in the result dtype (ints become floats for exp etc.)
_UNARY = {
    aten.neg: Op.NEG,
    aten.abs: Op.ABS,
    aten.exp: Op.EXP,
    aten.exp2: Op.EXP2,
    aten.log: Op.LOG,
    aten.log2: Op.LOG2,
    aten.log1p: Op.LOG1P,
    aten.expm1: Op.EXPM1,
    aten.sqrt: Op.SQRT,
    aten.rsqrt: Op.RSQRT,
    aten.sin: Op.SIN,
    aten.cos: Op.COS,
    aten.tanh: Op.TANH,
    aten.sigmoid: Op.SIGMOID,
    aten.erf: Op.ERF,
    aten.reciprocal: Op.RECIPROCAL,
    aten.relu: Op.RELU,
    aten.floor: Op.FLOOR,
    aten.ceil: Op.CEIL,
    aten.trunc: Op.TRUNC,
    aten.round: Op.ROUND,
    aten.sign: Op.SIGN,
    aten.bitwise_not: Op.BITWISE_NOT,
    aten.atan: Op.ATAN,
}
_FLOAT_ONLY = {Op.FLOOR, Op.CEIL, Op.TRUNC, Op.ROUND}


def _make_binary(name: Op) -> Fn:
    def lower(L: GraphLowering, node: torch.fx.Node, a: object, b: object) -> object:
        dt = out_dtype(node)
        if dt == torch.bool and name in (Op.MUL, Op.MAXIMUM, Op.MINIMUM):
            return NotImplemented
        return pointwise(node, [a, b], lambda v: op(name, dt, *v), dt)

    return lower


def _make_compare(name: Op) -> Fn:
    def lower(L: GraphLowering, node: torch.fx.Node, a: object, b: object) -> object:
        common = promote(a, b)
        return pointwise(node, [a, b], lambda v: op(name, torch.bool, *v), common)

    return lower


def _make_unary(name: Op) -> Fn:
    def lower(L: GraphLowering, node: torch.fx.Node, a: object) -> object:
        dt = out_dtype(node)
        if name in _FLOAT_ONLY and not dt.is_floating_point:
            return pointwise(node, [a], lambda v: v[0], dt)
        if name is Op.BITWISE_NOT and dt.is_floating_point:
            return NotImplemented
        if name is Op.SIGN and dt == torch.bool:
            return NotImplemented
        return pointwise(node, [a], lambda v: op(name, dt, *v), dt)

    return lower


for _packet, _name in _BINARY.items():
    register(_packet)(_make_binary(_name))
for _packet, _name in _COMPARE.items():
    register(_packet)(_make_compare(_name))
for _packet, _name in _UNARY.items():
    register(_packet)(_make_unary(_name))


@register(aten.add, aten.sub)
def _add_sub(
    L: GraphLowering, node: torch.fx.Node, a: object, b: object, *, alpha: object = 1
) -> object:
    dt = out_dtype(node)
    name = Op.ADD if node.target.overloadpacket is aten.add else Op.SUB  # type: ignore[union-attr]
    if dt == torch.bool:
        return NotImplemented

    def fn(v: list[VExpr]) -> VExpr:
        rhs = v[1] if alpha == 1 else op(Op.MUL, dt, v[1], c(alpha, dt))  # type: ignore[arg-type]
        return op(name, dt, v[0], rhs)

    return pointwise(node, [a, b], fn, dt)


@register(aten.rsub)
def _rsub(
    L: GraphLowering, node: torch.fx.Node, a: object, b: object, *, alpha: object = 1
) -> object:
    dt = out_dtype(node)
    if alpha != 1 or dt == torch.bool:
        return NotImplemented
    return pointwise(node, [a, b], lambda v: op(Op.SUB, dt, v[1], v[0]), dt)


@register(aten.div.Tensor, aten.div.Scalar, prims.div.default)
def _div(L: GraphLowering, node: torch.fx.Node, a: object, b: object) -> object:
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return NotImplemented  # integer division: leave the zero-divisor error to aten
    return pointwise(node, [a, b], lambda v: op(Op.TRUEDIV, dt, *v), dt)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(
    L: GraphLowering, node: torch.fx.Node, a: object, b: object, *, rounding_mode: str | None
) -> object:
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return NotImplemented
    post = {None: None, "floor": Op.FLOOR, "trunc": Op.TRUNC}[rounding_mode]

    def fn(v: list[VExpr]) -> VExpr:
        if post is Op.FLOOR:
            return op(Op.FLOOR_DIV, dt, *v)
        q = op(Op.TRUEDIV, dt, *v)
        return q if post is None else op(post, dt, q)

    return pointwise(node, [a, b], fn, dt)


@register(aten.remainder, aten.fmod)
def _remainder(L: GraphLowering, node: torch.fx.Node, a: object, b: object) -> object:
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return NotImplemented
    name = Op.REMAINDER if node.target.overloadpacket is aten.remainder else Op.FMOD  # type: ignore[union-attr]
    return pointwise(node, [a, b], lambda v: op(name, dt, *v), dt)


@register(aten.pow)
def _pow(L: GraphLowering, node: torch.fx.Node, a: object, b: object) -> object:
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return NotImplemented
    if isinstance(b, int | float) and not isinstance(b, bool):
        if b == 2:
            return pointwise(node, [a], lambda v: op(Op.MUL, dt, v[0], v[0]), dt)
        if b == 0.5:
            return pointwise(node, [a], lambda v: op(Op.SQRT, dt, v[0]), dt)
        if b == 1:
            return pointwise(node, [a], lambda v: v[0], dt)
        # the exponents eager's pow kernel computes by multiplication too (same rounding);
        # libm's powf is a scalar call per element (GPT-2's GELU: x^3 took 1.4 ms of 1.4 ms)
        if b == 3:
            return pointwise(
                node, [a], lambda v: op(Op.MUL, dt, op(Op.MUL, dt, v[0], v[0]), v[0]), dt
            )
        if b == -1:
            return pointwise(node, [a], lambda v: op(Op.TRUEDIV, dt, c(1.0, dt), v[0]), dt)
        if b == -2:
            return pointwise(
                node, [a], lambda v: op(Op.TRUEDIV, dt, c(1.0, dt), op(Op.MUL, dt, v[0], v[0])), dt
            )
    return pointwise(node, [a, b], lambda v: op(Op.POW, dt, *v), dt)


@register(aten.logical_not)
def _logical_not(L: GraphLowering, node: torch.fx.Node, a: object) -> object:
    assert isinstance(a, TensorValue)
    return pointwise(node, [a], lambda v: op(Op.LOGICAL_NOT, torch.bool, v[0]), a.dtype)


@register(aten.isnan)
def _isnan(L: GraphLowering, node: torch.fx.Node, a: object) -> object:
    assert isinstance(a, TensorValue)
    if not a.dtype.is_floating_point:
        return NotImplemented
    return pointwise(node, [a], lambda v: op(Op.NE, torch.bool, v[0], v[0]), a.dtype)


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(L: GraphLowering, node: torch.fx.Node, cond: object, a: object, b: object) -> object:
    dt = out_dtype(node)
    sizes = out_sizes(node)
    lc = broadcast_loader(to_tv(cond, torch.bool), sizes)
    la = broadcast_loader(to_tv(a, dt), sizes)
    lb = broadcast_loader(to_tv(b, dt), sizes)

    def load(idx: Sequence[IExpr]) -> VExpr:
        return op(Op.WHERE, dt, cast(lc(idx), torch.bool), cast(la(idx), dt), cast(lb(idx), dt))

    return TensorValue(sizes, dt, load)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(
    L: GraphLowering, node: torch.fx.Node, x: object, mask: object, value: object
) -> object:
    return _where(L, node, mask, value, x)


@functools.cache
def _eager_clamp_propagates_nan() -> bool:
    """Whether eager ``clamp`` with a NaN bound returns NaN (it changed between torch releases)."""
    return bool(torch.tensor([1.0]).clamp(max=float("nan")).isnan().item())


@register(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default, aten.hardtanh.default)
def _clamp(
    L: GraphLowering, node: torch.fx.Node, x: object, lo: object = None, hi: object = None
) -> object:
    target = node.target
    if target is aten.clamp_max.default:
        lo, hi = None, lo
    if target is aten.hardtanh.default:
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    dt = out_dtype(node)
    if dt == torch.bool or isinstance(lo, TensorValue) or isinstance(hi, TensorValue):
        return NotImplemented

    def bound(kind: Op, y: VExpr, value: object) -> VExpr:
        # clamp_lo/clamp_hi keep a NaN input and are cheap compares. A NaN bound gives what
        # the running torch's eager clamp gives: NaN on torch 2.13 (maximum/minimum propagate
        # it), the input unchanged on torch 2.11.
        if isinstance(value, float) and math.isnan(value) and _eager_clamp_propagates_nan():
            return op(Op.MAXIMUM if kind is Op.CLAMP_LO else Op.MINIMUM, dt, y, c(value, dt))
        return op(kind, dt, y, c(value, dt))  # type: ignore[arg-type]

    def fn(v: list[VExpr]) -> VExpr:
        y = v[0]
        if lo is not None:
            y = bound(Op.CLAMP_LO, y, lo)
        if hi is not None:
            y = bound(Op.CLAMP_HI, y, hi)
        return y

    return pointwise(node, [x], fn, dt)


@register(aten.gelu.default)
def _gelu(L: GraphLowering, node: torch.fx.Node, x: object, *, approximate: str = "none") -> object:
    dt = out_dtype(node)

    def fn(v: list[VExpr]) -> VExpr:
        a = v[0]
        half = op(Op.MUL, dt, a, c(0.5, dt))
        if approximate == "tanh":
            cube = op(Op.MUL, dt, op(Op.MUL, dt, a, a), a)
            inner = op(
                Op.MUL,
                dt,
                c(math.sqrt(2 / math.pi), dt),
                op(Op.ADD, dt, a, op(Op.MUL, dt, cube, c(0.044715, dt))),
            )
            return op(Op.MUL, dt, half, op(Op.ADD, dt, c(1.0, dt), op(Op.TANH, dt, inner)))
        erf = op(Op.ERF, dt, op(Op.MUL, dt, a, c(1 / math.sqrt(2), dt)))
        return op(Op.MUL, dt, half, op(Op.ADD, dt, c(1.0, dt), erf))

    return pointwise(node, [x], fn, dt)


@register(aten.silu.default)
def _silu(L: GraphLowering, node: torch.fx.Node, x: object) -> object:
    dt = out_dtype(node)
    return pointwise(node, [x], lambda v: op(Op.MUL, dt, v[0], op(Op.SIGMOID, dt, v[0])), dt)


# ---------------------------------------------------------------- copies and dtype


@register(aten._to_copy.default)
def _to_copy(L: GraphLowering, node: torch.fx.Node, x: object, **kwargs: object) -> object:
    assert isinstance(x, TensorValue)
    val = meta(node)
    if val.device != x_device(L) or kwargs.get("layout") not in (None, torch.strided):
        return NotImplemented
    return pointwise(node, [x], lambda v: v[0], x.dtype)


def x_device(L: GraphLowering) -> torch.device:
    return L.device or torch.device("cpu")


@register(prims.convert_element_type.default)
def _convert(L: GraphLowering, node: torch.fx.Node, x: object, dtype: torch.dtype) -> object:
    assert isinstance(x, TensorValue)
    return pointwise(node, [x], lambda v: v[0], x.dtype)


@register(aten.clone.default, aten.lift_fresh_copy.default, aten.alias.default)
def _identity(L: GraphLowering, node: torch.fx.Node, x: object, **kwargs: object) -> object:
    return x


@register(aten.copy.default)
def _copy(L: GraphLowering, node: torch.fx.Node, dst: object, src: object, *args: object) -> object:
    assert isinstance(src, TensorValue)
    return pointwise(node, [src], lambda v: v[0], src.dtype)


# ---------------------------------------------------------------- factories


@register(aten.full.default)
def _full(
    L: GraphLowering, node: torch.fx.Node, size: Sequence[int], value: object, **kw: object
) -> object:
    dt = out_dtype(node)
    if not isinstance(value, bool | int | float):
        return NotImplemented
    v = VConst(value, dt)
    return TensorValue(out_sizes(node), dt, lambda idx: v)


@register(aten.scalar_tensor.default)
def _scalar_tensor(L: GraphLowering, node: torch.fx.Node, value: object, **kw: object) -> object:
    dt = out_dtype(node)
    if not isinstance(value, bool | int | float):
        return NotImplemented
    return const(value, dt)


@register(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(L: GraphLowering, node: torch.fx.Node, *args: object, **kw: object) -> object:
    nums: list[object] = [a for a in args if isinstance(a, int | float | sympy.Expr)]
    # a symbolic end only sets the size (from meta); a symbolic start or step is left to aten
    bounds = {1: (), 2: (0,), 3: (0, 2)}.get(len(nums), tuple(range(len(nums))))
    if any(isinstance(nums[k], sympy.Expr) for k in bounds):
        return NotImplemented
    start: int | float
    step: int | float
    if len(nums) == 1:
        start, step = 0, 1
    elif len(nums) == 2:
        start, step = nums[0], 1  # type: ignore[assignment]
    else:
        start, step = nums[0], nums[2]  # type: ignore[assignment]
    dt = out_dtype(node)
    sizes = out_sizes(node)
    if isinstance(start, int) and isinstance(step, int) and not dt.is_floating_point:
        return TensorValue(
            sizes, dt, lambda idx: VIndex(iadd(imul(idx[0], step), IConst(start)), dt)
        )

    def load(idx: Sequence[IExpr]) -> VExpr:
        i = VIndex(idx[0], torch.float64)
        return cast(
            op(
                Op.ADD,
                torch.float64,
                op(Op.MUL, torch.float64, i, c(step, torch.float64)),
                c(start, torch.float64),
            ),
            dt,
        )

    return TensorValue(sizes, dt, load)


# ---------------------------------------------------------------- reductions


def _dims(x: TensorValue, dims: object) -> list[int]:
    if dims is None or (isinstance(dims, list | tuple) and len(dims) == 0):
        return list(range(x.ndim))
    if isinstance(dims, int):
        return [dims]
    assert isinstance(dims, list | tuple)
    return [int(d) for d in dims]


def _acc_cast(x: TensorValue, dt: torch.dtype) -> Callable[[Sequence[Any]], VExpr]:
    return lambda idx: cast(x.loader(idx), dt)


def _column_like(x: TensorValue, dims: list[int], hints: dict[Any, int] | None = None) -> bool:
    """Whether reducing ``dims`` walks memory across rows: the unit-stride dim is kept.

    A row kernel computes such a reduction one output at a time with a large stride between
    the elements it adds -- a cache line per element (7.8 ms for a 1024x1024 bias gradient,
    where eager's ``sum(dim=0)`` vectorises across the columns in one streaming pass). Until
    the C++ generator can put the reduction loop outside, these stay aten calls.
    """
    nd = x.ndim
    if not all(is_static(s) for s in x.sizes):
        # symbolic sizes: decided on the example sizes (``hints``); either choice is right
        # for every size, only its speed is at stake
        if hints is None:
            return False
        view = TensorValue(tuple(hint(s, hints) for s in x.sizes), x.dtype, x.loader, x.ref)
        return _column_like(view, dims)
    if nd < 2 or math.prod(x.sizes) < 65536:  # type: ignore[operator]
        return False  # under 256 KB of float the strided reads stay in cache
    red = {d % nd for d in dims}
    if len(red) == nd:
        return False
    if x.ref is not None:
        strides = x.ref.strides
        unit = [k for k in range(nd) if strides[k] == 1 and x.sizes[k] > 1]
        fastest = unit[0] if unit else nd - 1
    else:
        fastest = nd - 1  # a lazy value is stored contiguously when realized for the call
    inner = 1
    for k in range(fastest, nd):
        if k not in red:
            inner *= x.sizes[k]
    return fastest not in red and inner >= 16 and _reduced_numel(x, dims) > 1


@register(aten.sum.dim_IntList, aten.sum.default, prims.sum.default)
def _sum(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims: object = None,
    keepdim: bool = False,
    *,
    dtype: object = None,
    output_dtype: object = None,
) -> object:
    dt = out_dtype(node)
    if _column_like(x, _dims(x, dims), {b.symbol: b.hint for b in L.symbols.values()}):
        choice(f"sum {node.name} of {tuple(x.sizes)}", "aten", "a column reduction")
        return NotImplemented
    return L.reduce(x, _dims(x, dims), keepdim, "sum", dt, _acc_cast(x, dt))


@register(aten.prod.default, aten.prod.dim_int)
def _prod(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dim: object = None,
    keepdim: bool = False,
    *,
    dtype: object = None,
) -> object:
    dt = out_dtype(node)
    return L.reduce(x, _dims(x, dim), keepdim, "prod", dt, _acc_cast(x, dt))


@register(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default)
def _amax(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims: object = None,
    keepdim: bool = False,
) -> object:
    kind = "max" if node.target in (aten.amax.default, aten.max.default) else "min"
    if x.dtype == torch.bool:
        return NotImplemented
    return L.reduce(x, _dims(x, dims), keepdim, kind, x.dtype)  # type: ignore[arg-type]


def _reduced_numel(x: TensorValue, dims: list[int]) -> Size:
    """How many elements each output of a reduction over ``dims`` combines."""
    n: Size = 1
    for d in {d % max(x.ndim, 1) for d in dims} if x.ndim else []:
        n *= x.sizes[d]
    return n


def _mean_of(
    L: GraphLowering, x: TensorValue, dims: list[int], keepdim: bool, dt: torch.dtype
) -> TensorValue:
    n = _reduced_numel(x, dims)
    s = L.reduce(x, dims, keepdim, "sum", dt, _acc_cast(x, dt))
    src = s.loader
    count = size_value(n, dt)
    return TensorValue(s.sizes, dt, lambda idx: op(Op.TRUEDIV, dt, src(idx), count))


@register(aten.mean.dim, aten.mean.default)
def _mean(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims: object = None,
    keepdim: bool = False,
    *,
    dtype: object = None,
) -> object:
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return NotImplemented
    if x.ref is not None and (
        _column_like(x, _dims(x, dims), {b.symbol: b.hint for b in L.symbols.values()})
        or channels_last_pool(x, _dims(x, dims))
    ):
        # a stored channels-last activation averaged over H, W (a CNN's pooling): a row
        # kernel reads it with a stride of C floats, aten vectorises across the channels
        # (8x64x16x16: 104 us -> 9 us)
        choice(f"mean {node.name} of {tuple(x.sizes)}", "aten", "a column or channels-last pool")
        return NotImplemented
    return _mean_of(L, x, _dims(x, dims), keepdim, dt)


def _var(  # noqa: PLR0917
    L: GraphLowering,
    x: TensorValue,
    dims: list[int],
    correction: float,
    keepdim: bool,
    dt: torch.dtype,
) -> tuple[TensorValue, TensorValue]:
    """Variance and mean in two passes: the mean, then the deviations from it.

    With ``m`` the first pass's mean and ``d = x - m``: ``mean = m + sum(d) / n`` and
    ``var = (sum(d^2) - sum(d)^2 / n) / (n - correction)`` (the corrected two-pass form: the
    ``sum(d)`` terms remove what rounding left in ``m``). Both second-pass sums share one
    inner loop, and the scheduler puts both passes in one kernel, so a row that fits in cache
    is read from memory once. Shifting by a sample of the row instead (the one-pass form this
    replaced) lost digits whenever that sample lay far from the mean, by the square of the
    distance in standard deviations; Welford's update needs a division per element and a lane
    combine that GCC does not vectorise.
    """
    n = _reduced_numel(x, dims)
    red = {d % x.ndim for d in dims}
    mean_k = _mean_of(L, x, dims, True, dt)
    first = broadcast_loader(mean_k, x.sizes)

    def centred(idx: Sequence[Any]) -> VExpr:
        return op(Op.SUB, dt, cast(x.loader(idx), dt), first(idx))

    s1 = L.reduce(x, dims, True, "sum", dt, centred)
    s2 = L.reduce(x, dims, True, "sum", dt, lambda idx: op(Op.MUL, dt, centred(idx), centred(idx)))
    m_load, s1_load, s2_load = mean_k.loader, s1.loader, s2.loader
    nn = size_value(n, dt)
    if is_static(n):
        denom = c(float(max(n - correction, 0)), dt)  # type: ignore[operator]
    else:
        denom = op(Op.MAXIMUM, dt, op(Op.SUB, dt, nn, c(correction, dt)), c(0.0, dt))

    def var_at(idx: Sequence[Any]) -> VExpr:
        a = s1_load(idx)
        m2 = op(Op.SUB, dt, s2_load(idx), op(Op.TRUEDIV, dt, op(Op.MUL, dt, a, a), nn))
        # rounding can leave a tiny negative where the true value is 0
        m2 = op(Op.MAXIMUM, dt, m2, c(0.0, dt))
        return op(Op.TRUEDIV, dt, m2, denom)

    def mean_at(idx: Sequence[Any]) -> VExpr:
        return op(Op.ADD, dt, m_load(idx), op(Op.TRUEDIV, dt, s1_load(idx), nn))

    var = TensorValue(s1.sizes, dt, var_at)
    mean = TensorValue(s1.sizes, dt, mean_at)
    if not keepdim:
        squeeze = sorted(red)
        var, mean = var.squeeze(squeeze), mean.squeeze(squeeze)
    return var, mean


@register(aten.var.correction, prims.var.default, aten.var_mean.correction)
def _var_lowering(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims: object = None,
    correction: object = None,
    keepdim: bool = False,
    **kw: object,
) -> object:
    """``var`` (aten's, prims') and ``var_mean`` (the pair): one two-pass computation."""
    if node.target is not prims.var.default:  # aten's take correction and keepdim by keyword
        correction = kw.get("correction", correction)
        keepdim = bool(kw.get("keepdim", keepdim))
    dt = out_dtype(node)
    if not dt.is_floating_point:
        return NotImplemented
    corr = 1.0 if correction is None else float(correction)  # type: ignore[arg-type]
    var, mean = _var(L, x, _dims(x, dims), corr, keepdim, dt)
    return (var, mean) if node.target is aten.var_mean.correction else var


# ---------------------------------------------------------------- indexing


def _index_value(index: TensorValue, idx: Sequence[IExpr], bound: int) -> IExpr:
    return IValue(cast(index.loader(idx), torch.int64), bound)


@register(aten.embedding.default)
def _embedding(
    L: GraphLowering, node: torch.fx.Node, weight: TensorValue, indices: TensorValue, *a: object
) -> object:
    sizes = out_sizes(node)
    k = indices.ndim

    def load(idx: Sequence[IExpr]) -> VExpr:
        return weight.loader([_index_value(indices, idx[:k], weight.sizes[0]), idx[k]])

    return TensorValue(sizes, weight.dtype, load)


@register(aten.index_select.default)
def _index_select(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue
) -> object:
    dim %= max(x.ndim, 1)
    if x.ndim == 0:
        return NotImplemented

    def load(idx: Sequence[IExpr]) -> VExpr:
        new = list(idx)
        new[dim] = _index_value(index, [idx[dim]] if index.ndim else [], x.sizes[dim])
        return x.loader(new)

    return TensorValue(out_sizes(node), x.dtype, load)


@register(aten.gather.default)
def _gather(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dim: int,
    index: TensorValue,
    **kw: object,
) -> object:
    if x.ndim == 0 or kw.get("sparse_grad"):
        return NotImplemented
    dim %= x.ndim

    def load(idx: Sequence[IExpr]) -> VExpr:
        new = list(idx)
        new[dim] = _index_value(index, idx, x.sizes[dim])
        return x.loader(new)

    return TensorValue(out_sizes(node), x.dtype, load)


@register(aten.cat.default)
def _cat(L: GraphLowering, node: torch.fx.Node, xs: Sequence[TensorValue], dim: int = 0) -> object:
    sizes = out_sizes(node)
    dt = out_dtype(node)
    dim %= len(sizes)
    spec = L.new_buffer(sizes, dt)
    offset = 0
    for x in xs:
        if x.ndim == 1 and x.sizes[0] == 0 and len(sizes) != 1:
            continue  # legacy empty tensors are skipped by cat
        body = cast(x.loader(index_vars(x.ndim)), dt)
        L.nodes.append(
            PointwiseNode(spec.name, x.sizes, body, spec.strides, offset * spec.strides[dim], False)
        )
        offset += x.sizes[dim]
    return realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, dt))
