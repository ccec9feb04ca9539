"""Lowerings of view ops (and of the ``*_copy`` twins that aot graphs use instead).

Views on stored values change sizes/strides/offset; views on computed values remap the
index. Nothing here copies data, except a reshape that no strides can express.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ..ir import (
    IExpr,
    TensorRef,
    VExpr,
    contiguous_strides,
    imod,
)
from ..symbolic import Size, is_static, same, size_min, to_size
from ..tensorvalue import (
    TensorValue,
    realized,
    view_strides,
)
from .registry import (
    LOWERINGS,
    aten,
    meta,
    out_sizes,
    prims,
    register,
)

if TYPE_CHECKING:
    from ..graph_lowering import GraphLowering

__all__: list[str] = []


# ---------------------------------------------------------------- views


@register(aten.permute.default)
def _permute(L: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Sequence[int]) -> object:
    return x.permute(dims)


@register(aten.transpose.int)
def _transpose(L: GraphLowering, node: torch.fx.Node, x: TensorValue, a: int, b: int) -> object:
    dims = list(range(x.ndim))
    if x.ndim:
        a, b = a % x.ndim, b % x.ndim
        dims[a], dims[b] = dims[b], dims[a]
    return x.permute(dims)


@register(aten.t.default)
def _t(L: GraphLowering, node: torch.fx.Node, x: TensorValue) -> object:
    return x.permute(list(reversed(range(x.ndim))))


@register(aten.expand.default)
def _expand(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, sizes: Sequence[int], **kw: object
) -> object:
    return x.expand(out_sizes(node))


@register(aten.repeat.default)
def _repeat(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, repeats: Sequence[int]
) -> object:
    # out[..., i_k, ...] = x[..., i_k mod n_k, ...]: index math its consumer fuses (the aten
    # call it replaces copies a tensor that is mostly read once, e.g. deberta's position
    # embeddings tiled over the batch before a bmm)
    lead = len(repeats) - x.ndim
    if lead < 0 or not all(isinstance(r, int) for r in repeats) or 0 in x.sizes:
        return NotImplemented
    src = x.loader
    old = x.sizes

    def load(idx: Sequence[IExpr]) -> VExpr:
        inner = zip(idx[lead:], old, repeats[lead:], strict=True)
        return src([i if r == 1 else imod(i, n) for i, n, r in inner])

    return TensorValue(out_sizes(node), x.dtype, load)


@register(prims.broadcast_in_dim.default)
def _broadcast_in_dim(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, shape: Sequence[int], dims: Sequence[int]
) -> object:
    y = x
    for k in range(len(shape)):
        if k not in dims:
            y = y.unsqueeze(k)
    return y.expand(out_sizes(node))


@register(aten.slice.Tensor)
def _slice(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> object:
    n = x.sizes[dim % x.ndim]
    return x.slice(dim, 0 if start is None else start, n if end is None else size_min(end, n), step)


@register(aten.split_with_sizes.default, aten.split.Tensor)
def _split(
    L: GraphLowering, node: torch.fx.Node, x: TensorValue, sizes: object, dim: int = 0
) -> object:
    # each piece is a slice (index math), as in eager where split returns views
    d = dim % x.ndim
    n = x.sizes[d]
    if isinstance(sizes, int):
        if sizes <= 0 or not is_static(n):
            return NotImplemented
        bounds = list(range(0, n, sizes)) or [0]
        widths = [min(sizes, n - b) for b in bounds]
    else:
        assert isinstance(sizes, list | tuple)
        widths = [to_size(w) for w in sizes]
        if not same(sum(widths), n):
            return NotImplemented
    pieces = []
    start = 0
    for w in widths:
        pieces.append(x.slice(d, start, start + w, 1))
        start += w
    return pieces


@register(aten.unbind.int)
def _unbind(L: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int = 0) -> object:
    return [x.select(dim, i) for i in range(x.sizes[dim % x.ndim])]


@register(aten.select.int)
def _select(L: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: int) -> object:
    return x.select(dim, index)


@register(aten.unsqueeze.default)
def _unsqueeze(L: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int) -> object:
    return x.unsqueeze(dim)


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(L: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: object = None) -> object:
    if dims is None:
        dims = list(range(x.ndim))
    elif isinstance(dims, int):
        dims = [dims]
    assert isinstance(dims, list | tuple)
    return x.squeeze(dims)


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, prims.reshape.default)
def _view(L: GraphLowering, node: torch.fx.Node, x: TensorValue, size: Sequence[int]) -> object:
    sizes = out_sizes(node)
    if x.ref is None:
        if [s for s in x.sizes if s != 1] == [s for s in sizes if s != 1]:
            return _reinsert_ones(x, sizes)
        x = L.realize(x)
    ref = x.ref
    assert ref is not None
    strides = view_strides(ref.sizes, ref.strides, sizes)
    if strides is None and list(ref.strides) == list(contiguous_strides(ref.sizes)):
        # already contiguous: only symbolic sizes sympy cannot match get here (a -1 solved
        # by a division); storing the value again would not help
        return NotImplemented
    if strides is None:
        layout = _copy_layout(ref.sizes, ref.strides, sizes) or list(contiguous_strides(x.sizes))
        ref = L.realize(x, strides=layout).ref
        assert ref is not None
        strides = view_strides(ref.sizes, ref.strides, sizes)
        if strides is None:
            # symbolic sizes whose products sympy cannot match (a -1 solved by division)
            return NotImplemented
        assert strides is not None
    return realized(TensorRef(ref.buf, sizes, strides, ref.offset, ref.dtype))


def _copy_layout(
    sizes: Sequence[Size], strides: Sequence[Size], new_sizes: Sequence[Size]
) -> list[Size] | None:
    """A dense layout for copying a strided value so that reshaping it is a view.

    Only dims that the reshape merges must be adjacent, in order; the rest may lie in any
    order. Here they keep their logical order except that the group holding the source's
    unit-stride dim goes innermost, so the copy reads the source along rows. For
    attention's ``k.transpose(-2, -1)`` reshaped to (batch * heads, d, t) this stores k as
    (b, h, t, d), a plain row copy, and the matmul gets a transposed view (which BLAS takes
    as is), where a copy in logical order gathered a column at a time. None when the sizes
    do not chunk, or when the logical order is already the right one.
    """
    if not all(is_static(x) for x in (*sizes, *strides, *new_sizes)):
        return None  # symbolic sizes: the contiguous copy
    old = [d for d in range(len(sizes)) if sizes[d] != 1]
    new = [int(s) for s in new_sizes if s != 1]
    groups: list[list[int]] = []
    i = j = 0
    try:
        while i < len(old):
            group = [old[i]]
            po, pn = int(sizes[old[i]]), new[j]
            i, j = i + 1, j + 1
            while po != pn:
                if po < pn:
                    group.append(old[i])
                    po *= int(sizes[old[i]])
                    i += 1
                else:
                    pn *= new[j]
                    j += 1
            groups.append(group)
    except IndexError:
        return None
    if j != len(new):
        return None
    unit = [k for k, g in enumerate(groups) if any(strides[d] == 1 for d in g)]
    if not unit or unit[0] == len(groups) - 1:
        return None  # the logical order already ends on the unit-stride dim (or there is none)
    groups.append(groups.pop(unit[0]))
    layout: list[Size] = [1] * len(sizes)
    acc = 1
    for group in reversed(groups):
        for d in reversed(group):
            layout[d] = acc
            acc *= int(sizes[d])
    if view_strides(sizes, layout, new_sizes) is None:
        return None
    return layout


def _reinsert_ones(x: TensorValue, sizes: tuple[Size, ...]) -> TensorValue:
    """A reshape that only adds or drops size-1 dimensions, as index remapping."""
    y = x.squeeze([k for k in range(x.ndim) if x.sizes[k] == 1])
    for k, s in enumerate(sizes):
        if s == 1:
            y = y.unsqueeze(k)
    return y


@register(aten.as_strided.default)
def _as_strided(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None = None,
) -> object:
    src_meta = meta(node.args[0])  # type: ignore[arg-type]
    x = L.realize(x) if x.ref is None else x
    ref = x.ref
    assert ref is not None
    spec = L.buffers[ref.buf]
    if ref.offset != 0 or ref.strides != spec.strides:
        return NotImplemented
    base = int(src_meta.storage_offset())
    offset = (base if storage_offset is None else int(storage_offset)) - base
    return realized(TensorRef(ref.buf, tuple(size), tuple(stride), offset, ref.dtype))


# ---------------------------------------------------------------- *_copy forms (aot graphs)
# aot replaces every view op by its copying twin so graph values never alias; in the loop
# IR a copy is the same index math (the output logic stores a fresh buffer when needed).
_copy_packet: Any
_view_packet: Any
_COPY_TWINS = {
    "view_copy": aten.view.default,
    "permute_copy": aten.permute.default,
    "expand_copy": aten.expand.default,
    "unsqueeze_copy": aten.unsqueeze.default,
    "t_copy": aten.t.default,
    "alias_copy": aten.alias.default,
    "detach_copy": aten.alias.default,
    "as_strided_copy": aten.as_strided.default,
}
for _copy_name, _view_op in _COPY_TWINS.items():
    _copy_packet = getattr(aten, _copy_name, None)
    if _copy_packet is not None and hasattr(_copy_packet, "default"):
        LOWERINGS[_copy_packet.default] = LOWERINGS[_view_op]
for _copy_name, _overloads in (
    ("slice_copy", ("Tensor",)),
    ("select_copy", ("int",)),
    ("transpose_copy", ("int",)),
    ("squeeze_copy", ("dim", "dims", "default")),
    ("split_with_sizes_copy", ("default",)),
    ("split_copy", ("Tensor",)),
    ("unbind_copy", ("int",)),
):
    _copy_packet = getattr(aten, _copy_name, None)
    _view_packet = getattr(aten, _copy_name.removesuffix("_copy"))
    for _ov in _overloads:
        if _copy_packet is not None and hasattr(_copy_packet, _ov):
            LOWERINGS[getattr(_copy_packet, _ov)] = LOWERINGS[getattr(_view_packet, _ov)]
LOWERINGS[aten.detach.default] = LOWERINGS[aten.alias.default]
