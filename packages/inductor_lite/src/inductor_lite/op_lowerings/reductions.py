"""Reductions: sum, prod, max/min, any/all, mean, and var/var_mean in two passes; column-like sums
and pooling over channels-last activations stay aten calls (see ``_column_like``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..choices import choice
from ..ir import (
    Op,
    VExpr,
)
from ..spatial import channels_last_pool
from ..symbolic import Size, hint, is_static
from ..tensorvalue import (
    TensorValue,
    broadcast_loader,
    cast,
)
from .registry import (
    aten,
    c,
    op,
    out_dtype,
    prims,
    register,
    size_value,
)

if TYPE_CHECKING:
    from ..graph_lowering import GraphLowering

__all__: list[str] = []


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
    return L.reduce(x, _dims(x, dims), keepdim, Op.SUM, dt, _acc_cast(x, dt))


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
    return L.reduce(x, _dims(x, dim), keepdim, Op.PROD, dt, _acc_cast(x, dt))


@register(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default)
def _amax(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims: object = None,
    keepdim: bool = False,
) -> object:
    kind = Op.MAX if node.target in (aten.amax.default, aten.max.default) else Op.MIN
    if x.dtype == torch.bool:
        return NotImplemented
    return L.reduce(x, _dims(x, dims), keepdim, kind, x.dtype)


@register(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims)
@register(aten.all.default)
def _any_all(
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims: object = None,
    keepdim: bool = False,
) -> object:
    """``any``: a count of the nonzero elements, nonzero; ``all``: a count of the zero ones,
    zero (a count, not a max: the empty reduction gives eager's False / True)."""
    is_any = node.target in (aten.any.dim, aten.any.dims, aten.any.default)
    zero = c(False if x.dtype == torch.bool else 0, x.dtype)
    test = Op.NE if is_any else Op.EQ

    def hits(idx: Sequence[Any]) -> VExpr:
        return cast(op(test, torch.bool, x.loader(idx), zero), torch.int64)

    count = L.reduce(x, _dims(x, dims), keepdim, Op.SUM, torch.int64, hits)
    found = count.loader
    dt = out_dtype(node)

    def load(idx: Sequence[Any]) -> VExpr:
        n = op(Op.NE if is_any else Op.EQ, torch.bool, found(idx), c(0, torch.int64))
        return cast(n, dt)

    return TensorValue(count.sizes, dt, load)


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
    s = L.reduce(x, dims, keepdim, Op.SUM, dt, _acc_cast(x, dt))
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
    pool = x.ref is not None and channels_last_pool(x, _dims(x, dims))
    if pool and L._for_cpp():
        # the C++ generator sums a channels-last pool column-wise (column_sum.py): 1-5 us
        # where aten's call costs 40-90 us inside a model
        choice(f"mean {node.name} of {tuple(x.sizes)}", "column kernel", "a channels-last pool")
    elif pool or (
        x.ref is not None
        and _column_like(x, _dims(x, dims), {b.symbol: b.hint for b in L.symbols.values()})
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

    s1 = L.reduce(x, dims, True, Op.SUM, dt, centred)
    s2 = L.reduce(x, dims, True, Op.SUM, dt, lambda idx: op(Op.MUL, dt, centred(idx), centred(idx)))
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
        # an infinite first-pass mean is the mean (the correction would be inf - inf = NaN:
        # batch norm's running mean of a channel holding -inf, found by the op fuzzer)
        m = m_load(idx)
        finite = op(Op.LT, torch.bool, op(Op.ABS, dt, m), c(math.inf, dt))
        return op(Op.WHERE, dt, finite, op(Op.ADD, dt, m, op(Op.TRUEDIV, dt, s1_load(idx), nn)), m)

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
