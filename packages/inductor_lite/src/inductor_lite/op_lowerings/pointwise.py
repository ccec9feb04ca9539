"""Elementwise lowerings: arithmetic, comparisons and unary math by ``ir.Op`` (the tables
below), activations, copies and dtype conversions, and factories (full, arange)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import sympy
import torch
import torch.fx

from ..ir import (
    IConst,
    IExpr,
    Op,
    VConst,
    VExpr,
    VIndex,
    iadd,
    imul,
)
from ..tensorvalue import (
    TensorValue,
    broadcast_loader,
    cast,
)
from .registry import (
    Fn,
    aten,
    c,
    const,
    meta,
    op,
    out_dtype,
    out_sizes,
    pointwise,
    prims,
    promote,
    register,
    to_tv,
)

if TYPE_CHECKING:
    from ..graph_lowering import GraphLowering

__all__: list[str] = []


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


@register(aten.full_like.default)
def _full_like(
    L: GraphLowering, node: torch.fx.Node, x: object, value: object, **kw: object
) -> object:
    """A constant of ``x``'s shape; lazy, so a scatter into it (cross-entropy's backward) or
    its consumer never reads memory for it. Realized, it takes the layout of the node."""
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
