"""C statements for loop-IR value and index expressions (one kernel body at a time)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .cpp_prelude import STORAGE, compute_type
from .errors import LoweringError
from .ir import (
    IAdd,
    IConst,
    IDiv,
    IExpr,
    IMod,
    IMul,
    ISym,
    IValue,
    IVar,
    VCast,
    VConst,
    VExpr,
    VIndex,
    VLoad,
    VOp,
)
from .symbolic import cexpr

__all__ = ["Body", "store_expr"]

def _float_literal(value: float, ctype: str) -> str:
    if math.isnan(value):
        return f"std::numeric_limits<{ctype}>::quiet_NaN()"
    if math.isinf(value):
        sign = "-" if value < 0 else ""
        return f"{sign}std::numeric_limits<{ctype}>::infinity()"
    lit = float(value).hex()
    return f"{lit}f" if ctype == "float" else lit


def _literal(value: object, dtype: torch.dtype) -> str:
    ct = compute_type(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        return _float_literal(float(value), ct)  # type: ignore[arg-type]
    return f"static_cast<{ct}>({int(value)}LL)"  # type: ignore[call-overload]


_UNARY_FN = {
    "exp": "std::exp",
    "exp2": "std::exp2",
    "log": "std::log",
    "log2": "std::log2",
    "log1p": "std::log1p",
    "expm1": "std::expm1",
    "sqrt": "std::sqrt",
    "sin": "std::sin",
    "cos": "std::cos",
    "tanh": "std::tanh",
    "erf": "std::erf",
    "floor": "std::floor",
    "ceil": "std::ceil",
    "trunc": "std::trunc",
    "round": "std::nearbyint",
    "atan": "std::atan",
}
# float versions that vectorise (see vexp & co. in the prelude); double keeps libm
_VECTOR_FN = {"exp": "vexp", "tanh": "vtanh", "erf": "verf"}
_BINARY_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "and": "&",
    "or": "|",
    "xor": "^",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}


# GCC 12 leaves an inner loop scalar when a load's large constant stride divides its row base
# (a channels-last buffer read in NCHW order: c + w*C + h*W*C, w inner, C >= 24: "evolution of
# base is not affine"); held in a variable it cannot see through, the stride vectorises (a
# 32-channel BN + SiLU epilogue at 48x48: 344 -> 76 us). Strides 2..15 keep the literal.
_OPAQUE_STRIDE_MIN = 16


def _opaque_stride(c: object) -> bool:
    return type(c) is int and abs(c) >= _OPAQUE_STRIDE_MIN


class Body:
    """Emits C statements for value expressions, one temporary per distinct subexpression."""

    def __init__(  # noqa: PLR0917
        self,
        indent: str,
        params: dict[str, str],
        dtypes: dict[str, torch.dtype],
        inner: Sequence[str] = (),
        pre_indent: str = "",
        scratch_write: dict[VExpr, str] | None = None,
        scratch_read: dict[VExpr, str] | None = None,
    ):
        self.scratch_write = scratch_write or {}
        self.scratch_read = scratch_read or {}
        self.lines: list[str] = []
        # values that do not depend on the inner loop's variables: computed once, before it
        self.pre: list[str] = []
        self.cache: dict[object, str] = {}
        self.indent = indent
        self.pre_indent = pre_indent
        self.params = params
        self.dtypes = dtypes
        self.inner = frozenset(inner)
        self.counter = 0
        self._dep: dict[object, bool] = {}

    def tmp(self, ctype: str, expr: str, hoist: bool = False) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        if hoist:
            self.pre.append(f"{self.pre_indent}const {ctype} {name} = {expr};")
        else:
            self.lines.append(f"{self.indent}const {ctype} {name} = {expr};")
        return name

    def _stride(self, c: int) -> str:
        """A loop-invariant variable holding ``c``, opaque to GCC (``_opaque_stride``)."""
        name = self.cache.get(("stride", c))
        if name is None:
            name = self.cache[("stride", c)] = f"s{self.counter}"
            self.counter += 1
            self.pre.append(f'{self.pre_indent}int64_t {name} = {c}LL; __asm__("" : "+r"({name}));')
        return name

    def _index_dep(self, x: IExpr) -> bool:
        if isinstance(x, IVar):
            return x.name in self.inner
        if isinstance(x, IAdd):
            return any(self._index_dep(t) for t in x.terms)
        if isinstance(x, IMul | IDiv | IMod):
            return self._index_dep(x.a)
        if isinstance(x, IValue):
            return self.depends(x.v)
        return False

    def depends(self, v: VExpr) -> bool:
        """True when ``v`` changes along the inner loop."""
        hit = self._dep.get(v)
        if hit is None:
            if isinstance(v, VConst):
                hit = False
            elif isinstance(v, VIndex | VLoad):
                hit = self._index_dep(v.index)
            elif isinstance(v, VCast):
                hit = self.depends(v.x)
            else:
                hit = any(self.depends(a) for a in v.args)
            self._dep[v] = hit
        return hit

    def index(self, x: IExpr) -> str:
        if isinstance(x, IConst):
            return f"{x.value}LL"
        if isinstance(x, IVar):
            return x.name
        if isinstance(x, IAdd):
            return "(" + " + ".join(self.index(t) for t in x.terms) + ")"
        if isinstance(x, IMul):
            if isinstance(x.a, IVar) and x.a.name in self.inner and _opaque_stride(x.c):
                return f"({x.a.name} * {self._stride(int(x.c))})"
            return f"({self.index(x.a)} * {cexpr(x.c)})"
        if isinstance(x, IDiv):
            return f"({self.index(x.a)} / {cexpr(x.c)})"
        if isinstance(x, IMod):
            return f"({self.index(x.a)} % {cexpr(x.c)})"
        if isinstance(x, ISym):
            return cexpr(x.expr)
        if isinstance(x, IValue):
            return f"checked_index(static_cast<int64_t>({self.value(x.v)}), {cexpr(x.bound)})"
        raise LoweringError(f"unknown index expression {x!r}")

    def value(self, v: VExpr) -> str:
        cached = self.cache.get(v)
        if cached is not None:
            return cached
        if v in self.scratch_read:
            out = self.tmp(compute_type(v.dtype), f"{self.scratch_read[v]}[ri]")
        else:
            out = self._value(v)
            if v in self.scratch_write:
                self.lines.append(f"{self.indent}{self.scratch_write[v]}[ri] = {out};")
        self.cache[v] = out
        return out

    def _value(self, v: VExpr) -> str:
        if isinstance(v, VConst):
            return _literal(v.value, v.dtype)
        ct = compute_type(v.dtype)
        hoist = not self.depends(v)
        if isinstance(v, VIndex):
            return self.tmp(ct, f"static_cast<{ct}>({self.index(v.index)})", hoist)
        if isinstance(v, VLoad):
            ptr = self.params[v.buf]
            raw = f"{ptr}[{self.index(v.index)}]"
            if v.dtype == torch.bfloat16:
                raw = f"bf16_load({raw})"
            elif v.dtype == torch.float16:
                raw = f"static_cast<float>({raw})"
            elif v.dtype == torch.bool:
                raw = f"({raw} != 0)"
            return self.tmp(ct, raw, hoist)
        if isinstance(v, VCast):
            x = self.value(v.x)
            if v.dtype == torch.bool:
                return self.tmp(ct, f"({x} != 0)", hoist)
            if v.dtype == torch.float16:
                return self.tmp(ct, f"static_cast<float>(static_cast<_Float16>({x}))", hoist)
            if v.dtype == torch.bfloat16:
                return self.tmp(ct, f"bf16_load(bf16_store(static_cast<float>({x})))", hoist)
            return self.tmp(ct, f"static_cast<{ct}>({x})", hoist)
        assert isinstance(v, VOp)
        args = [self.value(a) for a in v.args]
        return self.tmp(ct, self._op(v, args, ct), hoist)

    def _op(self, v: VOp, a: list[str], ct: str) -> str:
        name = v.op
        is_float = v.dtype.is_floating_point
        if name in _BINARY_INFIX:
            return f"static_cast<{ct}>({a[0]} {_BINARY_INFIX[name]} {a[1]})"
        if ct == "float" and name in _VECTOR_FN:
            return f"{_VECTOR_FN[name]}({a[0]})"
        if name == "cos":
            # GCC merges sin(x) and cos(x) of one x into a scalar sincos call, which libmvec
            # cannot vectorise (6x slower); `x + 0` is another value to GCC (it differs for
            # -0.0) but not to cos, an even function
            return f"std::cos({a[0]} + {ct}(0))"
        if name in _UNARY_FN:
            return f"{_UNARY_FN[name]}({a[0]})"
        simple = {
            "neg": f"static_cast<{ct}>(-{a[0]})",
            "reciprocal": f"({ct}(1) / {a[0]})",
            "rsqrt": f"({ct}(1) / std::sqrt({a[0]}))",
            "sigmoid": f"({ct}(1) / ({ct}(1) + std::exp(-{a[0]})))"
            if ct != "float"
            else f"vsigmoid({a[0]})",
            "relu": f"({a[0]} < {ct}(0) ? {ct}(0) : {a[0]})",
            "logical_not": f"({a[0]} == 0)",
            "where": f"({a[0]} ? {a[1] if len(a) > 1 else ''} : {a[2] if len(a) > 2 else ''})",
        }
        if name in simple:
            return simple[name]
        if name == "abs":
            return f"std::abs({a[0]})" if is_float or v.dtype != torch.bool else a[0]
        if name == "sign":
            return f"sign_of<{ct}>({a[0]})"
        if name == "bitwise_not":
            return f"(!{a[0]})" if v.dtype == torch.bool else f"static_cast<{ct}>(~{a[0]})"
        if name in ("maximum", "minimum"):
            fn = "nan_max" if name == "maximum" else "nan_min"
            if is_float:
                return f"{fn}<{ct}>({a[0]}, {a[1]})"
            return f"std::{name[:3]}<{ct}>({a[0]}, {a[1]})"
        if name == "clamp_lo":
            return f"({a[0]} < {a[1]} ? {a[1]} : {a[0]})"
        if name == "clamp_hi":
            return f"({a[0]} > {a[1]} ? {a[1]} : {a[0]})"
        if name == "pow":
            return f"std::pow({a[0]}, {a[1]})"
        if name == "atan2":
            return f"std::atan2({a[0]}, {a[1]})"
        if name == "fmod":
            return f"std::fmod({a[0]}, {a[1]})"
        if name == "floor_div":
            return f"floor_div<{ct}>({a[0]}, {a[1]})"
        if name == "remainder":
            return f"py_remainder<{ct}>({a[0]}, {a[1]})"
        if name in ("logical_and", "logical_or", "logical_xor"):
            sym = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}[name]
            return f"(({a[0]} != 0) {sym} ({a[1]} != 0))"
        raise LoweringError(f"no C++ for op {name}")


def store_expr(dtype: torch.dtype, value: str) -> str:
    if dtype == torch.bfloat16:
        return f"bf16_store({value})"
    if dtype == torch.float16:
        return f"static_cast<_Float16>({value})"
    return f"static_cast<{STORAGE[dtype]}>({value})"
