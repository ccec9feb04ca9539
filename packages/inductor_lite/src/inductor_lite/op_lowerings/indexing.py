"""Indexing: embedding, index_select, gather and integer `index` (bounds-checked index reads),
scatter with one index per row (a bounds-checked compare), index_put with accumulate (a
scatter-add into a copy: the embedding backward), constant_pad_nd, cat and slice_scatter."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.fx

from ..ir import (
    IConst,
    IExpr,
    IValue,
    Op,
    PointwiseNode,
    TensorRef,
    VConst,
    VExpr,
    VIndex,
    VOp,
    iadd,
    imod,
    imul,
)
from ..symbolic import Size, is_static, same
from ..tensorvalue import (
    TensorValue,
    broadcast_loader,
    cast,
    index_vars,
    realized,
)
from .registry import (
    aten,
    meta,
    out_dtype,
    out_sizes,
    pointwise,
    register,
    size_value,
)

if TYPE_CHECKING:
    from ..graph_lowering import GraphLowering

__all__: list[str] = []


# ---------------------------------------------------------------- indexing


def _index_value(index: TensorValue, idx: Sequence[IExpr], bound: int) -> IExpr:
    return IValue(cast(index.loader(idx), torch.int64), bound)


def _wrapped_index(raw: VExpr, size: Size) -> IExpr:
    """An index read from a tensor as advanced indexing takes it: a negative one counts from
    the end; checked against ``size`` after that."""
    v = cast(raw, torch.int64)
    negative = VOp(Op.LT, (v, VConst(0, torch.int64)), torch.bool)
    wrapped = VOp(Op.ADD, (v, size_value(size, torch.int64)), torch.int64)
    return IValue(VOp(Op.WHERE, (negative, wrapped, v), torch.int64), size)


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


@register(aten.index.Tensor)
def _index(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, indices: Sequence[object]
) -> object:
    """``x[i0, i1, ...]`` with integer index tensors for the leading dims (transformers'
    ``padding_mask[batch_idx, kv_idx]``): a bounds-checked read like gather's, a negative
    index counting from the end as in eager. Masks and ``None`` entries stay aten calls (a
    mask's result has a data-dependent size)."""
    k = len(indices)
    if not 0 < k <= x.ndim or not all(
        isinstance(i, TensorValue) and i.dtype in (torch.int64, torch.int32) for i in indices
    ):
        return NotImplemented
    if not all(is_static(n) for n in x.sizes[:k]):
        return NotImplemented
    sizes = out_sizes(node)
    lead = len(sizes) - (x.ndim - k)
    loaders = [broadcast_loader(i, sizes[:lead]) for i in indices]  # type: ignore[arg-type]

    def load(idx: Sequence[IExpr]) -> VExpr:
        bounds = x.sizes[:k]
        picked = [_wrapped_index(ld(idx[:lead]), n) for ld, n in zip(loaders, bounds, strict=True)]
        return x.loader([*picked, *idx[lead:]])

    return TensorValue(sizes, x.dtype, load)


def _scatter_one(
    node: torch.fx.Node,
    x: TensorValue,
    dim: int,
    index: TensorValue,
    value: Callable[[Sequence[IExpr]], VExpr],
) -> object:
    """``x`` with ``value`` at ``index`` along ``dim``, where ``index`` holds one position per
    row (its ``dim`` extent is 1, its other extents ``x``'s): the lazy
    ``where(i_dim == index[row], value, x)``, which a consumer fuses (cross-entropy's backward
    scatters -1 into a zero tensor at the targets). ``index`` is read through a checked index,
    so an out-of-range target raises IndexError after the kernel as eager's scatter raises."""
    if x.ndim == 0 or index.ndim != x.ndim or not same(index.sizes[dim], 1):
        return NotImplemented
    if not all(same(index.sizes[d], x.sizes[d]) for d in range(x.ndim) if d != dim):
        return NotImplemented
    dt = out_dtype(node)

    def load(idx: Sequence[IExpr]) -> VExpr:
        row = list(idx)
        row[dim] = IConst(0)
        target = VIndex(_index_value(index, row, x.sizes[dim]), torch.int64)
        hit = VOp(Op.EQ, (VIndex(idx[dim], torch.int64), target), torch.bool)
        return VOp(Op.WHERE, (hit, cast(value(row), dt), cast(x.loader(idx), dt)), dt)

    return TensorValue(out_sizes(node), dt, load)


@register(aten.scatter.value)
def _scatter_value(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dim: int,
    index: TensorValue,
    value: object,
) -> object:
    if not isinstance(value, bool | int | float) or x.ndim == 0:
        return NotImplemented
    v = VConst(value, out_dtype(node))
    return _scatter_one(node, x, dim % x.ndim, index, lambda row: v)


@register(aten.scatter.src)
def _scatter_src(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dim: int,
    index: TensorValue,
    src: TensorValue,
) -> object:
    if x.ndim == 0 or src.ndim != x.ndim:
        return NotImplemented
    return _scatter_one(node, x, dim % x.ndim, index, src.loader)


@register(aten.index_put.default)
def _index_put(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    indices: Sequence[TensorValue | None],
    values: TensorValue,
    accumulate: bool = False,
) -> object:
    """``x`` with ``values`` added at the rows one integer index tensor names along dim 0
    (``embedding_dense_backward``'s decomposition: zeros, then each token's gradient added
    to its row). Two nodes write one fresh buffer: a copy of ``x``, then the scatter-add, its
    rows in order on one thread (scheduler.py and cpp.py keep it so: rows may repeat), each
    row's elements vectorised. A negative index counts from the end; one still out of range
    raises IndexError after the kernel (eager raises too). C++ only: Triton keeps aten's."""
    dt = out_dtype(node)
    if (
        not accumulate
        or len(indices) != 1
        or indices[0] is None
        or indices[0].dtype not in (torch.int64, torch.int32)
        or x.ndim == 0
        or dt == torch.bool
        or L.config.codegen == "triton"
        or meta(node).device.type != "cpu"
    ):
        return NotImplemented
    index = indices[0]
    k = index.ndim
    rows = x.sizes[0]
    spec = L.new_buffer(out_sizes(node), dt)
    L.nodes.append(
        PointwiseNode(
            spec.name, x.sizes, cast(x.loader(index_vars(x.ndim)), dt), spec.strides, 0, False
        )
    )
    sizes = (*index.sizes, *x.sizes[1:])
    load_values = broadcast_loader(values, sizes)
    ivars = index_vars(len(sizes))
    L.nodes.append(
        PointwiseNode(
            spec.name,
            sizes,
            cast(load_values(ivars), dt),
            (0,) * k + spec.strides[1:],
            0,
            False,
            store_index=imul(_wrapped_index(index.loader(ivars[:k]), rows), spec.strides[0]),
            accumulate=True,
        )
    )
    return realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, dt))


@register(aten.constant_pad_nd.default)
def _constant_pad_nd(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, pad: Sequence[object], value: object = 0
) -> object:
    """``x`` padded with ``value`` (negative pads crop), a lazy ``where`` its consumer fuses:
    the causal-LM loss's ``pad(labels, (0, 1), value=-100)``. A padded dim reads ``x`` at
    ``(i - lo) mod n`` (as slice_scatter does): inside, its element; outside, some element
    the ``where`` drops, never an address beyond ``x``. Static sizes of padded dims only."""
    if (
        len(pad) % 2
        or len(pad) // 2 > x.ndim
        or not all(isinstance(p, int) for p in pad)
        or not isinstance(value, bool | int | float)
    ):
        return NotImplemented
    dt = out_dtype(node)
    kind = bool if dt == torch.bool else float if dt.is_floating_point else int
    fill = VConst(kind(value), dt)
    bounds: dict[int, tuple[int, int, int]] = {}  # dim -> (lo, hi, size)
    for j in range(len(pad) // 2):
        d = x.ndim - 1 - j
        lo, hi = int(pad[2 * j]), int(pad[2 * j + 1])  # type: ignore[call-overload]
        if lo == 0 and hi == 0:
            continue
        n = x.sizes[d]
        if not is_static(n) or int(n) == 0:
            return NotImplemented
        bounds[d] = (lo, hi, int(n))

    def load(idx: Sequence[IExpr]) -> VExpr:
        src = list(idx)
        checks: list[VExpr] = []
        for d, (lo, hi, n) in bounds.items():
            if lo <= 0 and hi <= 0:
                src[d] = iadd(idx[d], IConst(-lo))  # a crop: always inside
                continue
            src[d] = imod(iadd(idx[d], IConst(-lo % n)), n)
            pos = VIndex(idx[d], torch.int64)
            if lo > 0:
                checks.append(VOp(Op.GE, (pos, VConst(lo, torch.int64)), torch.bool))
            if hi > 0:
                checks.append(VOp(Op.LT, (pos, VConst(lo + n, torch.int64)), torch.bool))
        got = cast(x.loader(src), dt)
        if not checks:
            return got
        inside = checks[0]
        for c in checks[1:]:
            inside = VOp(Op.LOGICAL_AND, (inside, c), torch.bool)
        return VOp(Op.WHERE, (inside, got, fill), dt)

    return TensorValue(out_sizes(node), dt, load)


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


@register(aten.slice_scatter.default)
def _slice_scatter(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    src: TensorValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> object:
    """``x`` with ``src`` in its ``[start, end)`` slice of ``dim``, as a lazy value that the
    consumer fuses: ``where(start <= i < end, src[i - start], x[i])``. The backward of a
    rotary embedding's halves and of a KV slice (8 aten calls per llama backward, each a
    clone and a copy). ``src`` is read at ``(i - start) mod n`` (``n`` its extent): its element
    inside the slice, and some element of it outside, whose value ``where`` drops (never an
    address beyond ``src``)."""
    dim %= max(x.ndim, 1)
    size = x.sizes[dim] if x.ndim else 0
    if (
        step != 1
        or x.ndim == 0
        or not is_static(size)
        or not all(isinstance(b, int | None) for b in (start, end))
    ):
        return NotImplemented
    lo = 0 if start is None else (start + size if start < 0 else start)
    hi = size if end is None else (end + size if end < 0 else end)
    lo, hi = min(max(lo, 0), size), min(max(hi, lo), size)
    n = hi - lo
    if n == 0:
        return x
    if src.sizes[dim] != n or src.ndim != x.ndim:
        return NotImplemented
    dt = out_dtype(node)
    if n == size:
        return pointwise(node, [src], lambda v: v[0], dt)
    shift = -lo % n

    def load(idx: Sequence[IExpr]) -> VExpr:
        i = idx[dim]
        inner = list(idx)
        inner[dim] = imod(iadd(i, IConst(shift)), n)
        pos = VIndex(i, torch.int64)
        inside = VOp(
            Op.LOGICAL_AND,
            (
                VOp(Op.GE, (pos, VConst(lo, torch.int64)), torch.bool),
                VOp(Op.LT, (pos, VConst(hi, torch.int64)), torch.bool),
            ),
            torch.bool,
        )
        return VOp(Op.WHERE, (inside, cast(src.loader(inner), dt), cast(x.loader(idx), dt)), dt)

    return TensorValue(out_sizes(node), dt, load)
