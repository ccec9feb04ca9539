"""Turn a torch ShapeEnv's guards into SHAPE predicates over the symbols' sources.

A predicate names each symbol (``s0 >= 2``) and maps that name to the symbol's source
(usually a ``SizeSource``: the check reads ``L['x'].size(0)``), as ``GuardSet.SHAPE`` takes
it.  Three kinds of facts are collected, in this order:

1. each symbol's value range from ``var_to_range`` (the ``>= 2`` lower bound that 0/1
   specialisation implies, plus any bound guards tightened), when finite;
2. replacements of a symbol by an integer (a specialisation the tracer made);
3. every guard in ``shape_env.guards``, in the order recorded.

Only integer arithmetic and comparisons are rendered (``+ - * ** // % max min abs``,
``& | ^``, ``== != < <= > >=``, ``and or not``, int/float conversions and true division);
anything else (``sqrt``, ``cos``, ...) raises ShapeGuardError.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch.utils._sympy.functions as symfn

from guards.errors import ShapeGuardError
from guards.source import Source

__all__ = ["shape_guards", "render_sympy"]

_REL_OPS: dict[Any, str] = {
    sympy.Eq: "==",
    sympy.Ne: "!=",
    sympy.Lt: "<",
    sympy.Le: "<=",
    sympy.Gt: ">",
    sympy.Ge: ">=",
}

# Integer bitwise ops of sizes (``x.size(0) & 1``). (Shifts reach the ShapeEnv already rewritten
# as products and floor divisions by powers of 2.)
_BITWISE_OPS: dict[Any, str] = {
    symfn.BitwiseFn_bitwise_and: "&",
    symfn.BitwiseFn_bitwise_or: "|",
    symfn.BitwiseFn_bitwise_xor: "^",
}


def render_sympy(expr: Any, name_of: Callable[[Any], str]) -> str:
    """Render a sympy integer/boolean expression as Python; ``name_of(symbol)`` names symbols."""

    def r(e: Any) -> str:
        if e is sympy.true or isinstance(e, sympy.logic.boolalg.BooleanTrue):
            return "True"
        if e is sympy.false or isinstance(e, sympy.logic.boolalg.BooleanFalse):
            return "False"
        if isinstance(e, sympy.Symbol):
            return name_of(e)
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, sympy.Float):
            # a sympy Float is finite (infinities are sympy.oo); repr round-trips exactly
            return repr(float(e))
        if isinstance(e, symfn.ToFloat):
            return f"float({r(e.args[0])})"
        if isinstance(e, symfn.TruncToInt):
            return f"int({r(e.args[0])})"
        if isinstance(e, symfn.RoundToInt):  # Python's round of a float: ties to even
            return f"round({r(e.args[0])})"
        if isinstance(e, symfn.FloorToInt):
            return f"int({r(e.args[0])} // 1)"
        if isinstance(e, symfn.CeilToInt):
            return f"-int(-{r(e.args[0])} // 1)"
        if isinstance(e, symfn.FloatTrueDiv | symfn.IntTrueDiv):
            return f"({r(e.args[0])} / {r(e.args[1])})"
        for rel, op in _REL_OPS.items():
            if isinstance(e, rel):
                lhs, rhs = e.args
                return f"({r(lhs)} {op} {r(rhs)})"
        if isinstance(e, sympy.And):
            return "(" + " and ".join(r(a) for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " or ".join(r(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"(not {r(e.args[0])})"
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(r(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(r(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow | symfn.PowByNatural):
            base, exp = e.args
            if isinstance(exp, sympy.Integer) and int(exp) >= 0:
                return f"({r(base)} ** {int(exp)})"
            raise ShapeGuardError(f"cannot render non-natural power {e} as integer Python")
        if isinstance(e, symfn.FloorDiv | symfn.CleanDiv):
            return f"({r(e.args[0])} // {r(e.args[1])})"
        if isinstance(e, symfn.Mod | symfn.PythonMod | sympy.Mod):
            return f"({r(e.args[0])} % {r(e.args[1])})"
        if isinstance(e, symfn.ModularIndexing):
            base, div, mod = e.args
            return f"(({r(base)} // {r(div)}) % {r(mod)})"
        for fn, op in _BITWISE_OPS.items():
            if isinstance(e, fn):
                lhs, rhs = e.args
                return f"({r(lhs)} {op} {r(rhs)})"
        if isinstance(e, symfn.Max | sympy.Max):
            return "max(" + ", ".join(r(a) for a in e.args) + ")"
        if isinstance(e, symfn.Min | sympy.Min):
            return "min(" + ", ".join(r(a) for a in e.args) + ")"
        if isinstance(e, sympy.Abs):
            return f"abs({r(e.args[0])})"
        raise ShapeGuardError(f"cannot render {type(e).__name__} in shape guard {expr}")

    return r(expr)


ShapeFact = tuple[str, str, dict[str, Source]]


def shape_guards(shape_env: Any, symbol_sources: Mapping[Any, Source]) -> list[ShapeFact]:
    """The ShapeEnv's facts as ``(predicate, description, operands)`` for ``GuardSet.SHAPE``.

    ``symbol_sources`` maps each sympy Symbol that can appear to where its value lives
    (``SizeSource(LocalSource('x'), 0)``).  A predicate names its symbols (``s0 == s1``) and
    ``operands`` maps each of those names to its Source.  A guard mentioning another symbol
    raises ShapeGuardError naming it.
    """
    names: dict[Any, str] = {}

    def name_of(sym: Any) -> str:
        source = symbol_sources.get(sym)
        if source is None:
            raise ShapeGuardError(
                f"shape guard mentions symbol {sym} with no source; "
                f"known: {sorted(str(s) for s in symbol_sources)}"
            )
        name = names.get(sym)
        if name is None:
            # torch names its symbols s0, u1, ...: identifiers; anything else gets a fresh one.
            text = str(sym)
            fresh = text.isidentifier() and text not in {"L", "G"} and not hasattr(builtins, text)
            name = text if fresh and not text.startswith("_") else f"_sym{len(names)}"
            names[sym] = name
        return name

    out: list[ShapeFact] = []
    seen: set[tuple[str, tuple[tuple[str, Source], ...]]] = set()

    def emit(pred: str, desc: str, symbols: Any) -> None:
        operands = {names[s]: symbol_sources[s] for s in symbols if s in names}
        key = (pred, tuple(sorted(operands.items())))
        if key not in seen:
            seen.add(key)
            out.append((pred, desc, operands))

    for sym in symbol_sources:
        vr = shape_env.var_to_range.get(sym)
        if vr is None:
            continue
        # torch's int_oo claims is_finite, so test for a plain Integer instead.
        if isinstance(vr.lower, sympy.Integer):
            emit(f"{name_of(sym)} >= {int(vr.lower)}", f"{sym} range lower bound", [sym])
        if isinstance(vr.upper, sympy.Integer):
            emit(f"{name_of(sym)} <= {int(vr.upper)}", f"{sym} range upper bound", [sym])
    for sym, value in shape_env.replacements.items():
        if sym in symbol_sources and isinstance(value, sympy.Integer):
            emit(f"{name_of(sym)} == {int(value)}", f"{sym} specialised to {value}", [sym])
    for guard in shape_env.guards:
        expr = guard.expr
        if expr is sympy.true:
            continue
        loc = getattr(guard, "sloc", None)
        where = f" at {loc}" if loc is not None else ""
        emit(render_sympy(expr, name_of), f"{expr}{where}", expr.free_symbols)
    return out
