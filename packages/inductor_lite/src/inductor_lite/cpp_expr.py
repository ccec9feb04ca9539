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
from .kernel_body import KernelBody, OpRenderer, template
from .symbolic import cexpr

__all__ = ["Body", "load_expr", "store_expr"]


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


# GCC 12 leaves an inner loop scalar when a load's large constant stride divides its row base
# (a channels-last buffer read in NCHW order: c + w*C + h*W*C, w inner, C >= 24: "evolution of
# base is not affine"); held in a variable it cannot see through, the stride vectorises (a
# 32-channel BN + SiLU epilogue at 48x48: 344 -> 76 us). Strides 2..15 keep the literal.
_OPAQUE_STRIDE_MIN = 16


def _opaque_stride(c: object) -> bool:
    return type(c) is int and abs(c) >= _OPAQUE_STRIDE_MIN


def _vectorised(fn: str, vector: str) -> OpRenderer:
    """A libm call whose float version vectorises (vexp & co. in the prelude); double keeps
    libm."""

    def render(self: Body, v: VOp, a: list[str], ct: str) -> str:
        return f"{vector}({a[0]})" if ct == "float" else f"{fn}({a[0]})"

    return render


def _extremum(nan_fn: str, std_fn: str) -> OpRenderer:
    """maximum/minimum: NaN-propagating for floats (the prelude's), std:: for ints."""

    def render(self: Body, v: VOp, a: list[str], ct: str) -> str:
        fn = nan_fn if v.dtype.is_floating_point else std_fn
        return f"{fn}<{ct}>({a[0]}, {a[1]})"

    return render


class Body(KernelBody):
    """Emits C statements for value expressions, one temporary per distinct subexpression."""

    backend = "C++"

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
        super().__init__(indent, params)
        self.scratch_write = scratch_write or {}
        self.scratch_read = scratch_read or {}
        # values that do not depend on the inner loop's variables: computed once, before it
        self.pre: list[str] = []
        self.pre_indent = pre_indent
        self.dtypes = dtypes
        self.inner = frozenset(inner)
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
            out = self.render(v)
            if v in self.scratch_write:
                self.lines.append(f"{self.indent}{self.scratch_write[v]}[ri] = {out};")
        self.cache[v] = out
        return out

    def compute_type(self, dtype: torch.dtype) -> str:
        return compute_type(dtype)

    def literal(self, value: object, dtype: torch.dtype) -> str:
        return _literal(value, dtype)

    def _hoisted_tmp(self, v: VExpr, expr: str) -> str:
        """A temporary for ``v``, computed before the inner loop when it does not vary there."""
        return self.tmp(compute_type(v.dtype), expr, not self.depends(v))

    def index_value(self, v: VIndex) -> str:
        return self._hoisted_tmp(v, f"static_cast<{compute_type(v.dtype)}>({self.index(v.index)})")

    def load(self, v: VLoad) -> str:
        raw = f"{self.params[v.buf]}[{self.index(v.index)}]"
        return self._hoisted_tmp(v, load_expr(v.dtype, raw))

    def cast(self, v: VCast, x: str) -> str:
        if v.dtype == torch.bool:
            return self._hoisted_tmp(v, f"({x} != 0)")
        if v.dtype == torch.float16:
            return self._hoisted_tmp(v, f"static_cast<float>(static_cast<_Float16>({x}))")
        if v.dtype == torch.bfloat16:
            return self._hoisted_tmp(v, f"bf16_load(bf16_store(static_cast<float>({x})))")
        return self._hoisted_tmp(v, f"static_cast<{compute_type(v.dtype)}>({x})")

    def bind(self, v: VOp, text: str) -> str:
        return self._hoisted_tmp(v, text)

    # ---------------------------------------------------------------- one method per ir.Op

    def infix(self, v: VOp, a: list[str], ct: str) -> str:
        return f"static_cast<{ct}>({a[0]} {v.op.infix} {a[1]})"

    op_exp = _vectorised("std::exp", "vexp")
    op_tanh = _vectorised("std::tanh", "vtanh")
    op_erf = _vectorised("std::erf", "verf")
    op_exp2 = template("std::exp2({0})")
    op_expm1 = template("std::expm1({0})")
    op_log = template("std::log({0})")
    op_log2 = template("std::log2({0})")
    op_log1p = template("std::log1p({0})")
    op_sqrt = template("std::sqrt({0})")
    op_rsqrt = template("({ct}(1) / std::sqrt({0}))")
    op_sin = template("std::sin({0})")
    # GCC merges sin(x) and cos(x) of one x into a scalar sincos call, which libmvec cannot
    # vectorise (6x slower); `x + 0` is another value to GCC (it differs for -0.0) but not
    # to cos, an even function
    op_cos = template("std::cos({0} + {ct}(0))")
    op_atan = template("std::atan({0})")
    op_floor = template("std::floor({0})")
    op_ceil = template("std::ceil({0})")
    op_trunc = template("std::trunc({0})")
    op_round = template("std::nearbyint({0})")
    op_neg = template("static_cast<{ct}>(-{0})")
    op_sign = template("sign_of<{ct}>({0})")
    op_reciprocal = template("({ct}(1) / {0})")
    op_relu = template("({0} < {ct}(0) ? {ct}(0) : {0})")
    op_pow = template("std::pow({0}, {1})")
    op_atan2 = template("std::atan2({0}, {1})")
    op_fmod = template("std::fmod({0}, {1})")
    op_floor_div = template("floor_div<{ct}>({0}, {1})")
    op_remainder = template("py_remainder<{ct}>({0}, {1})")
    op_maximum = _extremum("nan_max", "std::max")
    op_minimum = _extremum("nan_min", "std::min")
    op_clamp_lo = template("({0} < {1} ? {1} : {0})")
    op_clamp_hi = template("({0} > {1} ? {1} : {0})")
    op_logical_not = template("({0} == 0)")
    op_logical_and = template("(({0} != 0) && ({1} != 0))")
    op_logical_or = template("(({0} != 0) || ({1} != 0))")
    op_logical_xor = template("(({0} != 0) != ({1} != 0))")
    op_where = template("({0} ? {1} : {2})")

    def op_abs(self, v: VOp, a: list[str], ct: str) -> str:
        return a[0] if v.dtype == torch.bool else f"std::abs({a[0]})"

    def op_sigmoid(self, v: VOp, a: list[str], ct: str) -> str:
        if ct == "float":
            return f"vsigmoid({a[0]})"
        return f"({ct}(1) / ({ct}(1) + std::exp(-{a[0]})))"

    def op_bitwise_not(self, v: VOp, a: list[str], ct: str) -> str:
        return f"(!{a[0]})" if v.dtype == torch.bool else f"static_cast<{ct}>(~{a[0]})"


def load_expr(dtype: torch.dtype, raw: str) -> str:
    """``raw`` (an element in storage) as its compute type."""
    if dtype == torch.bfloat16:
        return f"bf16_load({raw})"
    if dtype == torch.float16:
        return f"static_cast<float>({raw})"
    if dtype == torch.bool:
        return f"({raw} != 0)"
    return raw


def store_expr(dtype: torch.dtype, value: str) -> str:
    if dtype == torch.bfloat16:
        return f"bf16_store({value})"
    if dtype == torch.float16:
        return f"static_cast<_Float16>({value})"
    return f"static_cast<{STORAGE[dtype]}>({value})"
