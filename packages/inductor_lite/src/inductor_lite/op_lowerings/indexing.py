"""Indexing: embedding, index_select and gather (bounds-checked index reads), and cat."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.fx

from ..ir import (
    IExpr,
    IValue,
    PointwiseNode,
    TensorRef,
    VExpr,
)
from ..tensorvalue import (
    TensorValue,
    cast,
    index_vars,
    realized,
)
from .registry import (
    aten,
    out_dtype,
    out_sizes,
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
