"""Indexing: embedding, index_select, gather and integer `index` (bounds-checked index reads),
cat and slice_scatter."""

from __future__ import annotations

from collections.abc import Sequence
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
)
from ..symbolic import is_static
from ..tensorvalue import (
    TensorValue,
    broadcast_loader,
    cast,
    index_vars,
    realized,
)
from .registry import (
    aten,
    out_dtype,
    out_sizes,
    pointwise,
    register,
)

if TYPE_CHECKING:
    from ..graph_lowering import GraphLowering

__all__: list[str] = []


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

    def wrapped(v: VExpr, n: int) -> IExpr:
        v = cast(v, torch.int64)
        negative = VOp(Op.LT, (v, VConst(0, torch.int64)), torch.bool)
        shifted = VOp(Op.ADD, (v, VConst(n, torch.int64)), torch.int64)
        return IValue(VOp(Op.WHERE, (negative, shifted, v), torch.int64), n)

    def load(idx: Sequence[IExpr]) -> VExpr:
        bounds = x.sizes[:k]
        picked = [wrapped(ld(idx[:lead]), int(n)) for ld, n in zip(loaders, bounds, strict=True)]
        return x.loader([*picked, *idx[lead:]])

    return TensorValue(sizes, x.dtype, load)


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
