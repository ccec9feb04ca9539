"""The op table (``LOWERINGS``: aten op or overload packet -> lowering), ``register``, and the
helpers every lowering module shares (result dtype and sizes, type promotion, pointwise values).

Each lowering receives the ``GraphLowering``, the fx node (its ``meta["val"]`` gives the
result's dtype and shape, which is how torch's type promotion reaches us) and the mapped
arguments, and returns a ``TensorValue`` (or a tuple of them). Returning
``NotImplemented`` sends that one call to the aten fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx

from ..ir import (
    IExpr,
    ISym,
    Op,
    VConst,
    VExpr,
    VIndex,
    VOp,
)
from ..symbolic import Size, is_static, to_size
from ..tensorvalue import SymScalar, TensorValue, broadcast_loader, cast

__all__ = ["LOWERINGS", "Lowering", "register"]

aten = torch.ops.aten
prims = torch.ops.prims
# A lowering gets the GraphLowering, the fx node (for its meta) and the mapped arguments.
Lowering = Callable[..., object]
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
