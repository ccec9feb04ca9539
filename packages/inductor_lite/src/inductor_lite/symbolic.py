"""Sizes known only at run time: sympy expressions over the graph's size symbols.

A size is a Python ``int`` when it is static and a ``sympy.Expr`` over the symbols of the
capture layer's ShapeEnv (``s0``, ``s1``, ...) when it is symbolic. Static sizes stay plain
ints everywhere, so a graph without symbols is lowered exactly as before. The symbols are
positive integers; the guards above us specialise 0 and 1, so a symbolic size is >= 2 and
``size == 1`` is (correctly) false for it.

Generated code reads the symbols from the inputs' shapes (the wrapper) and receives them as
``int64_t`` arguments (kernels). Expressions print to C++ and Python with ``cexpr``/``pyexpr``;
an expression we cannot print raises ``LoweringError`` (the graph then runs eagerly).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import sympy
import torch
from torch.utils._sympy.functions import (
    CleanDiv,
    FloorDiv,
    IntTrueDiv,
    Mod,
    ModularIndexing,
    PythonMod,
)
from torch.utils._sympy.symbol import SymT, symbol_is_type

from .errors import LoweringError

__all__ = [
    "Size",
    "cexpr",
    "expr_symbols",
    "floordiv",
    "hint",
    "is_static",
    "known_ge",
    "known_lt",
    "pyexpr",
    "pysizes",
    "same",
    "size_max",
    "size_min",
    "to_size",
    "tritonexpr",
]

Size: TypeAlias = int | sympy.Expr


def is_static(x: object) -> bool:
    """True for a plain int size (not a sympy expression)."""
    return isinstance(x, int)


def to_size(x: object) -> Size:
    """An int, a SymInt or a sympy expression as a size: int when it is a constant."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        node: Any = x.node
        expr = _simplify(node.expr)
        return int(expr) if isinstance(expr, sympy.Integer) else expr
    if isinstance(x, sympy.Integer):
        return int(x)
    if isinstance(x, sympy.Expr):
        return x
    raise LoweringError(f"not a size: {x!r}")


def _simplify(e: sympy.Expr) -> sympy.Expr:
    """Drops the ``Max(1, n)`` that fake strides carry when ``n >= 1`` is provable."""
    if not isinstance(e, sympy.Expr) or not e.args:
        return e
    args = [_simplify(a) for a in e.args]
    if type(e).__name__ in ("Max", "Min") and len(args) == 2:
        a, b = args
        if type(e).__name__ == "Max":
            if known_ge(a, b):
                return a
            if known_ge(b, a):
                return b
        else:
            if known_ge(a, b):
                return b
            if known_ge(b, a):
                return a
    return e.func(*args) if tuple(args) != e.args else e


def _norm(x: Size) -> Size:
    if isinstance(x, sympy.Integer):
        return int(x)
    return x


def same(a: Size, b: Size) -> bool:
    """True when ``a`` and ``b`` are equal for every value of the symbols."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(sympy.expand(a - b) == 0)


def _known(rel: object) -> bool:
    if isinstance(rel, bool):
        return rel
    return rel is sympy.true


def known_ge(a: Size, b: Size) -> bool:
    """True when ``a >= b`` provably holds (symbols are positive integers, >= 2)."""
    if isinstance(a, int) and isinstance(b, int):
        return a >= b
    diff = sympy.expand(a - b)
    if isinstance(diff, sympy.Integer):
        return int(diff) >= 0
    shifted = _shift(diff)
    return bool(shifted.is_nonnegative) or _known(diff >= 0)


def known_lt(a: Size, b: Size) -> bool:
    """True when ``a < b`` provably holds."""
    return known_ge(b, a + 1)


def _shift(e: sympy.Expr) -> sympy.Expr:
    # a symbolic size is >= 2 (0 and 1 are specialised by the guards): substitute s = t + 2
    # with t >= 0 so that sympy's sign rules see the tighter bound; a data-dependent
    # (unbacked) size may be 0 or 1: s = t
    subs = {
        s: sympy.Symbol(f"_t_{s.name}", integer=True, nonnegative=True)
        + (0 if symbol_is_type(s, SymT.UNBACKED_INT) else 2)
        for s in e.free_symbols
    }
    return sympy.expand(e.xreplace(subs))


def size_max(a: Size, b: Size) -> Size:
    """``max(a, b)`` when it is decidable, else ``sympy.Max``."""
    if known_ge(a, b):
        return a
    if known_ge(b, a):
        return b
    return _norm(sympy.Max(a, b))


_UNBOUNDED = 2**62  # slice ends like sys.maxsize: larger than any size


def size_min(a: Size, b: Size) -> Size:
    """``min(a, b)`` when it is decidable, else ``sympy.Min``."""
    if isinstance(a, int) and a >= _UNBOUNDED:
        return b
    if isinstance(b, int) and b >= _UNBOUNDED:
        return a
    if known_ge(a, b):
        return b
    if known_ge(b, a):
        return a
    return _norm(sympy.Min(a, b))


def floordiv(a: Size, b: Size) -> Size:
    """``a // b`` for non-negative sizes."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return _norm(FloorDiv(a, b))


def hint(x: Size, hints: Mapping[sympy.Symbol, int]) -> int:
    """The value of ``x`` for the example inputs (for heuristics only, never for results)."""
    if isinstance(x, int):
        return x
    e = sympy.sympify(x.xreplace(dict(hints)))  # a bare symbol gives the hint itself
    # a data-dependent (unbacked) size has no example value: take a typical one
    return int(e.xreplace(dict.fromkeys(e.free_symbols, sympy.Integer(_UNBACKED_HINT))))


_UNBACKED_HINT = 64


def expr_symbols(xs: Iterable[object]) -> set[sympy.Symbol]:
    """The free symbols of every sympy expression in ``xs`` (others are skipped)."""
    out: set[sympy.Symbol] = set()
    for x in xs:
        if isinstance(x, sympy.Expr):
            out |= {s for s in x.free_symbols if isinstance(s, sympy.Symbol)}
    return out


def _print(e: sympy.Expr, lang: str) -> str:
    py = lang in ("py", "triton")
    if isinstance(e, sympy.Integer):
        return f"{int(e)}" if py else f"{int(e)}LL"
    if isinstance(e, sympy.Symbol):
        return str(e.name)
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(_print(a, lang) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        parts = []
        for a in e.args:
            if isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer):
                raise LoweringError(f"non-integer size expression {e}")
            parts.append(_print(a, lang))
        return "(" + " * ".join(parts) + ")"
    if isinstance(e, sympy.Pow):
        base, exp = e.args
        if isinstance(exp, sympy.Integer) and int(exp) > 0:
            return "(" + " * ".join([_print(base, lang)] * int(exp)) + ")"
        raise LoweringError(f"size expression with a power {e}")
    if isinstance(e, FloorDiv | CleanDiv):
        a, b = (_print(x, lang) for x in e.args)
        return f"({a} // {b})" if py else f"strata_floordiv({a}, {b})"
    if isinstance(e, ModularIndexing):
        a, b, m = (_print(x, lang) for x in e.args)
        return f"(({a} // {b}) % {m})" if py else f"strata_mod(strata_floordiv({a}, {b}), {m})"
    if isinstance(e, Mod | PythonMod):
        a, b = (_print(x, lang) for x in e.args)
        return f"({a} % {b})" if py else f"strata_mod({a}, {b})"
    if type(e).__name__ in ("Max", "Min"):
        name = "max" if type(e).__name__ == "Max" else "min"
        args = [_print(x, lang) for x in e.args]
        if py:
            # in a @triton.jit function the builtin min/max fold constexpr arguments (the
            # interpreter's symbols) to a constexpr and take scalar tensors to tl.minimum
            return f"{name}({', '.join(args)})"
        out = args[0]
        for a in args[1:]:
            out = f"std::{name}<int64_t>({out}, {a})"
        return out
    if isinstance(e, IntTrueDiv):
        raise LoweringError(f"true division in a size expression {e}")
    raise LoweringError(f"cannot print size expression {e} ({type(e).__name__})")


def cexpr(x: Size) -> str:
    """``x`` as a C++ int64 expression."""
    if isinstance(x, int):
        return f"{x}LL"
    return _print(x, "c")


def pyexpr(x: Size) -> str:
    """``x`` as a Python int expression."""
    if isinstance(x, int):
        return repr(x)
    return _print(x, "py")


def tritonexpr(x: Size) -> str:
    """``x`` as an expression inside a ``@triton.jit`` function (symbols are arguments)."""
    if isinstance(x, int):
        return repr(x)
    return _print(x, "triton")


def pysizes(xs: Sequence[Size]) -> str:
    """A tuple of sizes as Python source (``(s0, 1024)``)."""
    inner = ", ".join(pyexpr(x) for x in xs)
    return f"({inner}{',' if len(xs) == 1 else ''})"
