"""The loop IR: index expressions, value expressions and the nodes that own buffers.

A pointwise node is a function from an index (one variable per output dimension,
``i0, i1, ...``) to a value expression; a reduction node is a function from an output
index (``i0, ...``) and a reduction index (``r0, ...``) to the value being reduced.
Everything here is a frozen record so that nodes can be hashed, compared and printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = [
    "BufferSpec",
    "FallbackNode",
    "IAdd",
    "IConst",
    "IDiv",
    "IExpr",
    "IMod",
    "IMul",
    "IValue",
    "IVar",
    "LoweredGraph",
    "Node",
    "OutputSpec",
    "PointwiseNode",
    "ReductionNode",
    "TensorRef",
    "VCast",
    "VConst",
    "VExpr",
    "VIndex",
    "VLoad",
    "VOp",
    "affine",
    "contiguous_strides",
    "iadd",
    "idiv",
    "imod",
    "imul",
]


# ---------------------------------------------------------------- index expressions


@dataclass(frozen=True)
class IConst:
    value: int


@dataclass(frozen=True)
class IVar:
    name: str


@dataclass(frozen=True)
class IAdd:
    terms: tuple[IExpr, ...]


@dataclass(frozen=True)
class IMul:
    a: IExpr
    c: int


@dataclass(frozen=True)
class IDiv:
    """Floor division of a non-negative index by a positive constant."""

    a: IExpr
    c: int


@dataclass(frozen=True)
class IMod:
    a: IExpr
    c: int


@dataclass(frozen=True)
class IValue:
    """An index read from a tensor (embedding, gather): data dependent, never affine.

    ``bound`` is the size of the dimension it indexes; code checks ``0 <= v < bound``.
    """

    v: VExpr
    bound: int


IExpr = IConst | IVar | IAdd | IMul | IDiv | IMod | IValue


def iadd(*xs: IExpr) -> IExpr:
    """Sum of index expressions, folding constants and flattening nested sums."""
    terms: list[IExpr] = []
    const = 0
    for x in xs:
        parts = x.terms if isinstance(x, IAdd) else (x,)
        for p in parts:
            if isinstance(p, IConst):
                const += p.value
            else:
                terms.append(p)
    if const:
        terms.append(IConst(const))
    if not terms:
        return IConst(0)
    if len(terms) == 1:
        return terms[0]
    return IAdd(tuple(terms))


def imul(x: IExpr, c: int) -> IExpr:
    """Index times a constant."""
    if c == 0:
        return IConst(0)
    if c == 1:
        return x
    if isinstance(x, IConst):
        return IConst(x.value * c)
    if isinstance(x, IMul):
        return imul(x.a, x.c * c)
    if isinstance(x, IAdd):
        return iadd(*(imul(t, c) for t in x.terms))
    return IMul(x, c)


def idiv(x: IExpr, c: int) -> IExpr:
    """Floor division of a non-negative index by a positive constant."""
    if c == 1:
        return x
    if isinstance(x, IConst):
        return IConst(x.value // c)
    if isinstance(x, IMul) and x.c % c == 0:
        return imul(x.a, x.c // c)
    return IDiv(x, c)


def imod(x: IExpr, c: int) -> IExpr:
    """Remainder of a non-negative index by a positive constant."""
    if c == 1:
        return IConst(0)
    if isinstance(x, IConst):
        return IConst(x.value % c)
    if isinstance(x, IMul) and x.c % c == 0:
        return IConst(0)
    return IMod(x, c)


def affine(x: IExpr) -> tuple[dict[str, int], int] | None:
    """``x`` as ``sum(coef * var) + const``, or None when it is not affine."""
    if isinstance(x, IConst):
        return {}, x.value
    if isinstance(x, IVar):
        return {x.name: 1}, 0
    if isinstance(x, IMul):
        inner = affine(x.a)
        if inner is None:
            return None
        return {k: v * x.c for k, v in inner[0].items()}, inner[1] * x.c
    if isinstance(x, IAdd):
        coefs: dict[str, int] = {}
        const = 0
        for t in x.terms:
            part = affine(t)
            if part is None:
                return None
            for k, v in part[0].items():
                coefs[k] = coefs.get(k, 0) + v
            const += part[1]
        return coefs, const
    return None


# ---------------------------------------------------------------- value expressions


@dataclass(frozen=True)
class VLoad:
    """Element ``index`` (a flat offset from the buffer's data pointer) of ``buf``."""

    buf: str
    index: IExpr
    dtype: torch.dtype


@dataclass(frozen=True)
class VConst:
    value: float | int | bool
    dtype: torch.dtype


@dataclass(frozen=True)
class VIndex:
    """An index expression used as a value (arange, iota)."""

    index: IExpr
    dtype: torch.dtype


@dataclass(frozen=True)
class VOp:
    """``op`` applied to ``args``; every arg already has the dtype the op computes in."""

    op: str
    args: tuple[VExpr, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class VCast:
    x: VExpr
    dtype: torch.dtype


VExpr = VLoad | VConst | VIndex | VOp | VCast


# ---------------------------------------------------------------- buffers and nodes


def contiguous_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides for ``sizes``."""
    strides: list[int] = []
    acc = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class BufferSpec:
    """A tensor the wrapper allocates (``torch.empty_strided``) or receives."""

    name: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


@dataclass(frozen=True)
class TensorRef:
    """A strided view of a buffer: how a fallback argument or an output is materialised."""

    buf: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: torch.dtype


@dataclass(frozen=True)
class PointwiseNode:
    """Writes ``body(i0, ...)`` for every index of ``sizes`` into ``buf``.

    The element lands at ``offset + sum(i_k * strides[k])``. ``full_store`` is true when
    the node writes the whole buffer contiguously (the case fusion can reason about).
    """

    buf: str
    sizes: tuple[int, ...]
    body: VExpr
    strides: tuple[int, ...]
    offset: int
    full_store: bool


ReductionType = Literal["sum", "max", "min", "prod"]


@dataclass(frozen=True)
class ReductionNode:
    """For each output index ``i`` (over ``out_sizes``) reduces ``body(i, r)`` over ``red_sizes``.

    The result is stored contiguously in ``buf`` (flat over ``out_sizes``); ``acc_dtype`` is
    what the accumulator holds, ``body.dtype`` what the buffer holds after conversion.
    """

    buf: str
    out_sizes: tuple[int, ...]
    red_sizes: tuple[int, ...]
    body: VExpr
    reduction: ReductionType
    dtype: torch.dtype


@dataclass(frozen=True)
class FallbackNode:
    """An aten call from the wrapper. Tensor arguments are ``TensorRef``s (in ``args``).

    ``outputs`` names the buffers bound to the results (``None`` for results unused).
    """

    target: Any  # an OpOverload: the torch boundary
    args: tuple[object, ...]
    kwargs: tuple[tuple[str, object], ...]
    outputs: tuple[BufferSpec | None, ...]
    multi_output: bool


Node = PointwiseNode | ReductionNode | FallbackNode


@dataclass(frozen=True)
class OutputSpec:
    """One flat graph output: a view of a buffer, or a non-tensor constant."""

    ref: TensorRef | None
    constant: object = None


@dataclass
class LoweredGraph:
    """Everything the scheduler and the wrapper need, in program order."""

    inputs: list[BufferSpec]
    constants: dict[str, torch.Tensor]
    buffers: dict[str, BufferSpec]
    nodes: list[Node]
    outputs: list[OutputSpec]
    device: torch.device
