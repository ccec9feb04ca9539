"""Tensor values during lowering: an index -> value function, possibly backed by a buffer.

A ``TensorValue`` is *lazy* when it is only a loader (pointwise work that has not been
given memory yet; consumers inline it) and *realized* when it is a strided view of a
buffer (``ref`` set). View operations on realized values change sizes/strides/offset;
on lazy values they remap the index. Neither copies data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .ir import (
    IConst,
    IExpr,
    IVar,
    TensorRef,
    VCast,
    VExpr,
    VLoad,
    VOp,
    contiguous_strides,
    iadd,
    idiv,
    imod,
    imul,
    isize,
    subexpressions,
)
from .symbolic import Size, floordiv, is_static, same, size_max, size_min, to_size

__all__ = [
    "Loader",
    "SymScalar",
    "TensorValue",
    "broadcast_loader",
    "buffers_read",
    "cast",
    "expr_cost",
    "index_vars",
    "realized",
    "view_strides",
]

Loader = Callable[[Sequence[IExpr]], VExpr]


@dataclass(frozen=True)
class SymScalar:
    """A float computed from sizes at run time (``2.0 / (sym_float(n) - 1.0)`` in a backward
    graph): a float64 value expression over the size symbols, computed inside the kernels."""

    value: VExpr


@dataclass(frozen=True)
class TensorValue:
    sizes: tuple[Size, ...]
    dtype: torch.dtype
    loader: Loader
    ref: TensorRef | None = None
    # a lazy permutation of a lazy value: (that value, dims). An aten call that needs it in
    # memory gets a permuted view of the value stored in its own order (contiguous writes,
    # and shared with other users of the value) instead of a transposed copy.
    perm_of: tuple[TensorValue, tuple[int, ...]] | None = None

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    @property
    def numel(self) -> Size:
        return math.prod(self.sizes)

    # ------------------------------------------------------------ views

    def permute(self, dims: Sequence[int]) -> TensorValue:
        dims = [d % max(self.ndim, 1) for d in dims]
        sizes = tuple(self.sizes[d] for d in dims)
        if self.ref is not None:
            r = self.ref
            return realized(
                TensorRef(r.buf, sizes, tuple(r.strides[d] for d in dims), r.offset, r.dtype)
            )
        inv = [0] * len(dims)
        for new, old in enumerate(dims):
            inv[old] = new
        src = self.loader
        if self.perm_of is not None:
            base, base_dims = self.perm_of
            origin = (base, tuple(base_dims[d] for d in dims))
        else:
            origin = (self, tuple(dims))
        return TensorValue(
            sizes,
            self.dtype,
            lambda idx: src([idx[inv[k]] for k in range(len(inv))]),
            None,
            origin,
        )

    def expand(self, sizes: Sequence[Size]) -> TensorValue:
        sizes = tuple(to_size(s) for s in sizes)
        lead = len(sizes) - self.ndim
        sizes = tuple(self.sizes[k - lead] if s == -1 else s for k, s in enumerate(sizes))
        if self.ref is not None:
            r = self.ref
            strides = [0] * lead + [
                0 if (self.sizes[k] == 1 and sizes[k + lead] != 1) else r.strides[k]
                for k in range(self.ndim)
            ]
            return realized(TensorRef(r.buf, sizes, tuple(strides), r.offset, r.dtype))
        return TensorValue(sizes, self.dtype, broadcast_loader(self, sizes))

    def slice(self, dim: int, start: Size, end: Size, step: int) -> TensorValue:
        dim %= self.ndim
        n = self.sizes[dim]
        if is_static(n) and is_static(start) and is_static(end):
            start = max(0, min(n, start + n if start < 0 else start))  # type: ignore[operator]
            end = max(start, min(n, end + n if end < 0 else end))  # type: ignore[operator]
            length: Size = (end - start + step - 1) // step
        else:
            # symbolic bounds: clamped as eager clamps them, decided symbolically where
            # provable and left to Max/Min at run time otherwise
            if is_static(start) and start < 0:  # type: ignore[operator]
                start = n + start
            if is_static(end) and end < 0:  # type: ignore[operator]
                end = n + end
            start = size_max(0, size_min(n, start))
            end = size_max(start, size_min(n, end))
            length = floordiv(end - start + step - 1, step)
        sizes = (*self.sizes[:dim], length, *self.sizes[dim + 1 :])
        if self.ref is not None:
            r = self.ref
            strides: list[Size] = list(r.strides)
            strides[dim] = r.strides[dim] * step
            return realized(
                TensorRef(r.buf, sizes, tuple(strides), r.offset + start * r.strides[dim], r.dtype)
            )
        src = self.loader

        def load(idx: Sequence[IExpr]) -> VExpr:
            new = list(idx)
            new[dim] = iadd(imul(idx[dim], step), isize(start))
            return src(new)

        return TensorValue(sizes, self.dtype, load)

    def select(self, dim: int, index: int) -> TensorValue:
        dim %= self.ndim
        if index < 0:
            index += self.sizes[dim]
        sizes = self.sizes[:dim] + self.sizes[dim + 1 :]
        if self.ref is not None:
            r = self.ref
            strides = r.strides[:dim] + r.strides[dim + 1 :]
            return realized(
                TensorRef(r.buf, sizes, strides, r.offset + index * r.strides[dim], r.dtype)
            )
        src = self.loader
        return TensorValue(
            sizes, self.dtype, lambda idx: src([*idx[:dim], IConst(index), *idx[dim:]])
        )

    def unsqueeze(self, dim: int) -> TensorValue:
        dim = dim % (self.ndim + 1)
        sizes = (*self.sizes[:dim], 1, *self.sizes[dim:])
        if self.ref is not None:
            r = self.ref
            strides = (*r.strides[:dim], 1, *r.strides[dim:])
            return realized(TensorRef(r.buf, sizes, strides, r.offset, r.dtype))
        src = self.loader
        return TensorValue(sizes, self.dtype, lambda idx: src([*idx[:dim], *idx[dim + 1 :]]))

    def squeeze(self, dims: Sequence[int]) -> TensorValue:
        drop = {d % max(self.ndim, 1) for d in dims if self.sizes[d % max(self.ndim, 1)] == 1}
        keep = [k for k in range(self.ndim) if k not in drop]
        sizes = tuple(self.sizes[k] for k in keep)
        if self.ref is not None:
            r = self.ref
            return realized(
                TensorRef(r.buf, sizes, tuple(r.strides[k] for k in keep), r.offset, r.dtype)
            )
        src = self.loader
        ndim = self.ndim

        def load(idx: Sequence[IExpr]) -> VExpr:
            full: list[IExpr] = [IConst(0)] * ndim
            for pos, k in enumerate(keep):
                full[k] = idx[pos]
            return src(full)

        return TensorValue(sizes, self.dtype, load)

    def reshape_lazy(self, sizes: Sequence[Size]) -> TensorValue:
        """Reshape as index math: new index -> flat position -> old index."""
        sizes = tuple(sizes)
        src = self.loader
        old = self.sizes
        new_strides = contiguous_strides(sizes)
        old_strides = contiguous_strides(old)

        def load(idx: Sequence[IExpr]) -> VExpr:
            flat = iadd(*(imul(i, s) for i, s in zip(idx, new_strides, strict=True)))
            out: list[IExpr] = []
            for k, n in enumerate(old):
                out.append(IConst(0) if n == 1 else imod(idx_div(flat, old_strides[k]), n))
            return src(out)

        return TensorValue(sizes, self.dtype, load)


def idx_div(x: IExpr, c: Size) -> IExpr:
    return idiv(x, c)


def index_vars(n: int, prefix: str = "i") -> list[IExpr]:
    """``[i0, i1, ...]``: the loop variables a node's body is written over."""
    return [IVar(f"{prefix}{k}") for k in range(n)]


def realized(ref: TensorRef) -> TensorValue:
    """A value that reads ``ref``'s buffer through its strides."""

    def load(idx: Sequence[IExpr]) -> VExpr:
        terms = [imul(i, s) for i, s in zip(idx, ref.strides, strict=True) if s != 0]
        return VLoad(ref.buf, iadd(isize(ref.offset), *terms), ref.dtype)

    return TensorValue(ref.sizes, ref.dtype, load, ref)


def broadcast_loader(x: TensorValue, out_sizes: Sequence[Size]) -> Loader:
    """Loader of ``x`` broadcast (right-aligned) to ``out_sizes``."""
    lead = len(out_sizes) - x.ndim
    if lead == 0 and tuple(out_sizes) == x.sizes:
        return x.loader
    src = x.loader
    sizes = x.sizes

    def load(idx: Sequence[IExpr]) -> VExpr:
        return src([IConst(0) if sizes[k] == 1 else idx[k + lead] for k in range(len(sizes))])

    return load


def cast(v: VExpr, dtype: torch.dtype) -> VExpr:
    """``v`` converted to ``dtype`` (no-op when it already is)."""
    current = v.dtype
    if current == dtype:
        return v
    return VCast(v, dtype)


def expr_cost(v: VExpr) -> int:
    """Number of distinct operations in ``v`` (shared subtrees counted once)."""
    return sum(isinstance(e, VOp | VLoad) for e in subexpressions(v))


def buffers_read(v: VExpr) -> set[str]:
    """The buffers ``v`` loads from (its memory traffic, where ``expr_cost`` counts work)."""
    return {e.buf for e in subexpressions(v) if isinstance(e, VLoad)}


def _below(a: Size, b: Size) -> bool:
    if is_static(a) and is_static(b):
        return a < b  # type: ignore[operator]
    return not same(a, b)


def view_strides(
    old_sizes: Sequence[Size], old_strides: Sequence[Size], new_sizes: Sequence[Size]
) -> tuple[Size, ...] | None:
    """Strides that let ``new_sizes`` view memory laid out as (old_sizes, old_strides).

    None when the reshape needs a copy. Works chunk by chunk: runs of old dimensions
    that are contiguous with each other can be split or merged freely.
    """
    old = [(s, st) for s, st in zip(old_sizes, old_strides, strict=True) if s != 1]
    new_strides: list[Size] = [0] * len(new_sizes)
    numel: Size = 1
    for s in old_sizes:
        numel *= s
    if numel == 0:
        return contiguous_strides(new_sizes)
    oi = 0
    ni = 0
    n_new = len(new_sizes)
    while ni < n_new:
        if new_sizes[ni] == 1:
            new_strides[ni] = 1
            ni += 1
            continue
        if oi >= len(old):
            return None
        # take one chunk of old dims that is contiguous inside itself
        oj = oi
        while oj + 1 < len(old) and same(old[oj][1], old[oj + 1][0] * old[oj + 1][1]):
            oj += 1
        # the chunk spans dims oi..oj; its innermost stride is old[oj][1]
        chunk_size: Size = 1
        for k in range(oi, oj + 1):
            chunk_size *= old[k][0]
        chunk_inner_stride = old[oj][1]
        # new dims must multiply exactly to chunk_size; old dims may be consumed partially
        # only at chunk boundaries, so match against the whole chunk
        acc: Size = 1
        start = ni
        while ni < n_new and _below(acc, chunk_size):
            acc *= new_sizes[ni]
            ni += 1
        if not same(acc, chunk_size):
            return None
        stride = chunk_inner_stride
        for k in range(ni - 1, start - 1, -1):
            new_strides[k] = stride
            stride *= new_sizes[k]
        oi = oj + 1
    if oi != len(old):
        return None
    return tuple(new_strides)
