"""Facts about FX nodes and their example values that the lowering asks (layouts, views,
aten readers, metadata queries, size arithmetic as kernel values)."""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable, Sequence

import sympy
import torch
import torch.fx

from .ir import ISym, Op, VCast, VConst, VExpr, VIndex, VOp
from .op_lowerings import LOWERINGS
from .symbolic import Size, is_static, same, to_size
from .tensorvalue import SymScalar, TensorValue

__all__ = [
    "is_dense",
    "same_layout",
    "broadcasts",
    "is_view_op",
    "read_by_a_call",
    "METADATA_QUERIES",
    "is_static_scalar",
    "symbolic_value",
    "query_example",
    "takes",
    "sym_scalar",
    "static_tensor",
]


def is_dense(sizes: Sequence[Size], strides: Sequence[Size]) -> bool:
    """True when (sizes, strides) covers a block of memory exactly once (any dim order)."""
    if not all(is_static(x) for x in (*sizes, *strides)):
        # symbolic: find the dims innermost first by their strides' exact values
        left = [(s, st) for s, st in zip(sizes, strides, strict=True) if s != 1]
        expected: Size = 1
        while left:
            hit = next((p for p in left if same(p[1], expected)), None)
            if hit is None:
                return False
            left.remove(hit)
            expected = expected * hit[0]
        return True
    dims = sorted(
        ((st, s) for s, st in zip(sizes, strides, strict=True) if s != 1), key=lambda p: p[0]
    )
    expected = 1
    for st, s in dims:  # type: ignore[assignment]
        if st != expected:
            return False
        expected *= s
    return True


def same_layout(sizes: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """True when strides ``a`` and ``b`` agree on every dim that has more than one element."""
    return all(
        (is_static(s) and int(s) <= 1) or same(x, y) for s, x, y in zip(sizes, a, b, strict=True)
    )


def broadcasts(small: TensorValue, big: object) -> bool:
    """True when ``small``'s shape broadcasts to ``big``'s (a convolution's weight does not
    broadcast to its output: it is not re-read per element, nothing is saved by storing it)."""
    if not isinstance(big, torch.Tensor) or not all(is_static(s) for s in small.sizes):
        return False
    try:
        shape = torch.broadcast_shapes(  # type: ignore[no-untyped-call]
            tuple(int(s) for s in small.sizes), tuple(big.shape)
        )
    except RuntimeError:
        return False
    return tuple(shape) == tuple(big.shape)


def is_view_op(node: torch.fx.Node) -> bool:
    """True when eager's result of ``node`` aliases an input (a view op, by its schema)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(
        r.alias_info is not None and not r.alias_info.is_write for r in target._schema.returns
    )


def read_by_a_call(node: torch.fx.Node) -> bool:
    """Whether an aten call (an op without a lowering) reads ``node``, directly or through
    views: such a reader gets the value stored."""
    todo = list(node.users)
    while todo:
        user = todo.pop()
        if is_view_op(user):
            todo.extend(user.users)
        elif user.op == "call_function" and user.target not in LOWERINGS:
            # NB: matches the overload only, and most lowerings are registered by packet
            # (aten.amax, not aten.amax.default), so lowered readers count too: Triton then
            # stores most multi-reader values. The GPU memory figures (transformer_block_train
            # 18.0 MiB simulated) depend on that; looking packets up too gives 19.0 MiB.
            # Issue #22: replace with a rule that says which stores free memory.
            return True
    return False


METADATA_QUERIES = frozenset(
    {
        torch.ops.aten.size,
        torch.ops.aten.sym_size,
        torch.ops.aten.stride,
        torch.ops.aten.sym_stride,
        torch.ops.aten.numel,
        torch.ops.aten.sym_numel,
        torch.ops.aten.dim,
    }
)


def is_static_scalar(val: object) -> bool:
    if isinstance(val, list | tuple):
        return all(is_static_scalar(v) for v in val)
    return isinstance(val, int | bool)


def symbolic_value(val: object) -> object:
    """A (possibly symbolic) int, or a list of them, as sizes; None for anything else."""
    if isinstance(val, list | tuple):
        items = [symbolic_value(v) for v in val]
        return None if any(i is None for i in items) else type(val)(items)
    if isinstance(val, torch.SymInt | int) and not isinstance(val, bool):
        return to_size(val)
    return None


def query_example(node: torch.fx.Node, target: torch._ops.OpOverload) -> object:
    """A size/stride query answered on its input's example value.

    Older torch (2.11) leaves ``meta['val']`` unset on an int-valued node after fake
    propagation; the input tensor's example carries the static sizes.
    """
    args = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    try:
        return target(*args, **node.kwargs)
    except Exception:  # not answerable here: the query stays an aten call
        return None


SCALAR_OPS = {
    operator.add: Op.ADD,
    operator.sub: Op.SUB,
    operator.mul: Op.MUL,
    operator.truediv: Op.TRUEDIV,
}


def as_float_value(x: object) -> VExpr | None:
    if isinstance(x, SymScalar):
        return x.value
    if isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return VConst(float(x), torch.float64)
    if isinstance(x, sympy.Expr):
        return VCast(VIndex(ISym(x), torch.int64), torch.float64)
    return None


@functools.cache
def takes(fn: Callable[..., object], n_args: int, kwargs: tuple[str, ...]) -> bool:
    """Whether a lowering takes a call of this shape: a lowering registered for an op's whole
    packet may not know an overload's extra arguments (``round(x, decimals=1)``), and such a node
    falls back to its aten kernel instead of failing the graph."""
    try:
        inspect.signature(fn).bind(None, None, *([None] * n_args), **dict.fromkeys(kwargs))
    except TypeError:
        return False
    return True


def sym_scalar(target: object, args: Sequence[object]) -> SymScalar | None:
    """``sym_float`` of a size and float arithmetic on it, as a value computed in kernels."""
    if target is torch.sym_float and len(args) == 1 and isinstance(args[0], sympy.Expr):
        value = as_float_value(args[0])
        assert value is not None
        return SymScalar(value)
    name = SCALAR_OPS.get(target)  # type: ignore[call-overload]
    if name is None or len(args) != 2 or not any(isinstance(a, SymScalar) for a in args):
        return None
    a, b = (as_float_value(x) for x in args)
    if a is None or b is None:
        return None
    return SymScalar(VOp(name, (a, b), torch.float64))


def static_tensor(t: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in (*t.shape, *t.stride()))
