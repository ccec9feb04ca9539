"""C++/OpenMP code generation: one translation unit per graph, one function per kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .cascade import chunked_reduction, reduction_setup, wants_chunks
from .errors import LoweringError
from .ir import (
    BufferSpec,
    IAdd,
    IConst,
    IDiv,
    IExpr,
    IMod,
    IMul,
    ISym,
    IValue,
    IVar,
    PointwiseNode,
    ReductionNode,
    VCast,
    VConst,
    VExpr,
    VIndex,
    VLoad,
    VOp,
)
from .row_scratch import MAX_ROW, canonical_step, plan_scratch
from .scheduler import Kernel, Step, iter_loads, kernel_symbols
from .symbolic import Size, cexpr, is_static, same

__all__ = ["LIBMVEC_DECLS", "LIBMVEC_FUNCTIONS", "KernelSource", "generate_cpp"]

# libm functions that glibc's libmvec (2.35+) has vector variants of. glibc's math.h declares
# them `omp declare simd` only under -ffast-math, which we do not use (it drops NaN/inf
# semantics everywhere). Declaring them ourselves lets GCC call the vector variants from
# `omp simd` loops while every other operation keeps IEEE semantics; libmvec's functions
# handle NaN, +-inf, -0.0 and large arguments like libm (within 4 ulp; tested against torch).
LIBMVEC_FUNCTIONS: tuple[tuple[str, int], ...] = (
    ("sin", 1), ("cos", 1), ("tan", 1), ("exp", 1), ("exp2", 1), ("expm1", 1),
    ("log", 1), ("log2", 1), ("log1p", 1), ("atan", 1), ("tanh", 1), ("erf", 1),
    ("pow", 2), ("atan2", 2),
)  # fmt: skip


def _libmvec_decls() -> str:
    lines = ['extern "C" {']
    for name, arity in LIBMVEC_FUNCTIONS:
        for ct, suffix in (("double", ""), ("float", "f")):
            params = ", ".join([ct] * arity)
            lines += ["#pragma omp declare simd notinbranch", f"{ct} {name}{suffix}({params});"]
    lines.append("}")
    return "\n".join(lines) + "\n"


LIBMVEC_DECLS = _libmvec_decls()

_STORAGE = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "_Float16",
    torch.bfloat16: "uint16_t",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    # bool memory is bytes: a `bool` load makes GCC vectorise the 0/1 check badly (a masked
    # softmax ran 4x slower); values are computed as `bool` (see compute_type)
    torch.bool: "uint8_t",
}


def compute_type(dtype: torch.dtype) -> str:
    """The C type values of ``dtype`` are computed in (half types widen to float)."""
    if dtype in (torch.float16, torch.bfloat16):
        return "float"
    if dtype == torch.bool:
        return "bool"
    try:
        return _STORAGE[dtype]
    except KeyError:
        raise LoweringError(f"no C type for {dtype}") from None


_PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#include <memory>
#include <omp.h>

static inline float bf16_load(uint16_t v) {
    uint32_t u = static_cast<uint32_t>(v) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t bf16_store(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
}
template <typename T> static inline T nan_max(T a, T b) {
    return (a != a) ? a : ((b != b) ? b : (a > b ? a : b));
}
template <typename T> static inline T nan_min(T a, T b) {
    return (a != a) ? a : ((b != b) ? b : (a < b ? a : b));
}
template <typename T> static inline T py_remainder(T a, T b) {
    T r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// floor(a / b) computed from the exact remainder, so a quotient that rounds onto an
// integer boundary does not flip the result (matches eager's floor division)
template <typename T> static inline T floor_div(T a, T b) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    T fl = std::floor(div);
    if (div - fl > T(0.5)) fl += T(1);
    return fl;
}
// eager's sign: (0 < a) - (a < 0), so NaN gives 0 and -0.0 gives +0.0
template <typename T> static inline T sign_of(T a) {
    return T((T(0) < a) - (a < T(0)));
}

// Branch-free float math that GCC can vectorise (std:: calls stay scalar without -ffast-math).
static inline __attribute__((always_inline)) float vexp(float x) {
    // exp(x) = 2^k * exp(r), k = round(x / ln2), |r| <= ln2 / 2, exp(r) by a degree-6 fit of
    // our own (relative error 1.7e-8). Results under e^-87 (near FLT_MIN) are flushed to 0: a
    // subnormal lane costs a microcode assist for the whole vector (softmax's -inf masks).
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;
    const float ln2_lo = 1.42860682030941723212e-6f;
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.72283f ? 88.72283f : xc;
    // round to nearest through the 1.5 * 2^23 shifter (exact here, and it vectorises)
    float k = (xc * log2e + 12582912.0f) - 12582912.0f;
    float r = std::fma(-k, ln2_hi, xc);
    r = std::fma(-k, ln2_lo, r);
    float p = 0.0013836727011948824f;
    p = std::fma(p, r, 0.008374898694455624f);
    p = std::fma(p, r, 0.041668232530355453f);
    p = std::fma(p, r, 0.16666419804096222f);
    p = std::fma(p, r, 0.49999991059303284f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    // 2^k added to p's exponent field (normal: k = -126 comes with p > 1, k = 128 with p < 1)
    uint32_t kbits = static_cast<uint32_t>(static_cast<int32_t>(k)) << 23;
    float y = __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, p) + kbits);
    y = x > 88.72283f ? std::numeric_limits<float>::infinity() : y;
    y = x < -87.0f ? 0.0f : y;
    return x != x ? x : y;
}
static inline __attribute__((always_inline)) float vsigmoid(float x) {
    return 1.0f / (1.0f + vexp(-x));
}
static inline __attribute__((always_inline)) float vtanh(float x) {
    // tanh(x) = x P(x^2) / Q(x^2) on |x| <= 9 (beyond, tanh rounds to +-1 in float): a
    // rational fit of our own (degrees 5/4 in x^2, weighted least squares iterated toward
    // minimax, relative fit error 1.3e-9), under 5 ulp in float like the exp-based form it
    // replaces, at half its cost: no exp, one division
    float ax = std::fabs(x);
    ax = ax > 9.0f ? 9.0f : ax;
    float z = ax * ax;
    float p = -1.2248086225796762e-11f;
    p = std::fma(p, z, 3.0645079363011973e-08f);
    p = std::fma(p, z, 2.8032394766341895e-05f);
    p = std::fma(p, z, 0.0038695624098181725f);
    p = std::fma(p, z, 0.13680900633335114f);
    p = std::fma(p, z, 1.0f);
    float q = 1.2891101732748211e-06f;
    q = std::fma(q, z, 0.00039408088196069f);
    q = std::fma(q, z, 0.02725035697221756f);
    q = std::fma(q, z, 0.47014233469963074f);
    q = std::fma(q, z, 1.0f);
    float r = ax * p / q;
    r = r > 1.0f ? 1.0f : r;
    r = std::copysign(r, x);
    return x != x ? x : r;
}
static inline __attribute__((always_inline)) float verf(float x) {
    // erf(x) = x P(x^2) / Q(x^2) on |x| <= 3.92 (beyond, erf rounds to +-1 in float): a
    // rational fit of our own (weighted least squares, iterated toward minimax), error under
    // 4e-7 in float; no exp, one division
    float ax = std::fabs(x);
    ax = ax > 3.92f ? 3.92f : ax;
    float z = ax * ax;
    float p = 2.0507152385107474e-06f;
    p = std::fma(p, z, 0.0002848234726116061f);
    p = std::fma(p, z, 0.003762657754123211f);
    p = std::fma(p, z, 0.05273960158228874f);
    p = std::fma(p, z, 0.19033648073673248f);
    p = std::fma(p, z, 1.1283791065216064f);
    float q = 3.809513509622775e-05f;
    q = std::fma(q, z, 0.001161831896752119f);
    q = std::fma(q, z, 0.014963281340897083f);
    q = std::fma(q, z, 0.11408030241727829f);
    q = std::fma(q, z, 0.5020141005516052f);
    q = std::fma(q, z, 1.0f);
    float r = ax * p / q;
    r = r > 1.0f ? 1.0f : r;
    r = std::copysign(r, x);
    return x != x ? x : r;
}

// an out-of-range index (embedding, gather, index_select) reads element 0 instead and raises
// the flag; the wrapper turns the flag into IndexError after the kernel, as eager would raise
static int strata_index_error = 0;
static inline int64_t checked_index(int64_t i, int64_t n) {
    if (i < 0 || i >= n) {
        __atomic_store_n(&strata_index_error, 1, __ATOMIC_RELAXED);
        return 0;
    }
    return i;
}
extern "C" int strata_take_index_error() {
    return __atomic_exchange_n(&strata_index_error, 0, __ATOMIC_RELAXED);
}

extern "C" void strata_set_num_threads(int n) { omp_set_num_threads(n); }

// size arithmetic on symbolic sizes (Python's floor division and modulo)
static inline int64_t strata_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t strata_mod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


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


class _Body:
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


def _store(dtype: torch.dtype, value: str) -> str:
    if dtype == torch.bfloat16:
        return f"bf16_store({value})"
    if dtype == torch.float16:
        return f"static_cast<_Float16>({value})"
    return f"static_cast<{_STORAGE[dtype]}>({value})"


def _var_defs(names: Sequence[str], sizes: Sequence[Size], loop_var: str, indent: str) -> list[str]:
    """Recover per-dimension variables from a flattened loop counter."""
    out: list[str] = []
    for k, (name, size) in enumerate(zip(names, sizes, strict=True)):
        below: Size = 1
        for s in sizes[k + 1 :]:
            below *= s
        leading = all(s == 1 for s in sizes[:k])
        if size == 1:
            expr = "0LL"
        elif same(below, 1) and leading:
            expr = loop_var
        elif same(below, 1):
            expr = f"({loop_var} % {cexpr(size)})"
        elif leading:
            expr = f"({loop_var} / {cexpr(below)})"
        else:
            expr = f"(({loop_var} / {cexpr(below)}) % {cexpr(size)})"
        out.append(f"{indent}const int64_t {name} = {expr};")
    return out


@dataclass(frozen=True)
class KernelSource:
    name: str
    params: tuple[str, ...]  # buffer names, in argument order
    symbols: tuple[str, ...] = ()  # size symbols (int64_t), after the buffers


def _kernel(
    kernel: Kernel, buffers: dict[str, BufferSpec], threshold: int
) -> tuple[str, KernelSource]:
    used: list[str] = []
    written: set[str] = set()
    for step in kernel.steps:
        written.add(step.node.buf)
        for name in [step.node.buf, *(ld.buf for ld in iter_loads(step.node.body))]:
            if name not in used:
                used.append(name)
    params = {name: f"p_{name}" for name in used}
    sig = ", ".join(
        f"{'' if n in written else 'const '}{_STORAGE[buffers[n].dtype]}* __restrict__ {params[n]}"
        for n in used
    )
    symbols = kernel_symbols(kernel)
    if symbols:
        sig = ", ".join([sig, *(f"int64_t {name}" for name in symbols)])
    dtypes = {n: buffers[n].dtype for n in used}
    rows = kernel.outer_numel
    work = kernel.work
    if is_static(work) and is_static(rows):
        parallel_outer = rows > 1 and work >= threshold and rows >= 4  # type: ignore[operator]
        parallel_inner = not parallel_outer and work >= threshold  # type: ignore[operator]
        when = ""
    else:
        # decided per call by OpenMP's if clause: the sizes are known only then
        parallel_outer = not is_static(rows) or rows >= 4  # type: ignore[operator]
        parallel_inner = not parallel_outer
        when = f" if({cexpr(work)} >= {threshold}LL)"
    lines = [f'extern "C" void {kernel.name}({sig}) {{']
    if parallel_outer:
        lines.append(f"    #pragma omp parallel for schedule(static){when}")
    lines.append(f"    for (int64_t o = 0; o < {cexpr(rows)}; ++o) {{")
    # emission units: one step, or several same-shaped reductions sharing one loop
    units: list[list[tuple[int, Step]]] = []
    for n, step in enumerate(kernel.steps):
        last = units[-1] if units else None
        if (
            isinstance(step.node, ReductionNode)
            and last is not None
            and isinstance(last[0][1].node, ReductionNode)
            and _joins(last, step)
        ):
            last.append((n, step))
        else:
            units.append([(n, step)])
    canon = [[(n, *canonical_step(st)) for n, st in unit] for unit in units]
    plan = plan_scratch([[(st, names) for _, st, names in unit] for unit in canon])
    for name, value, length in plan.arrays:
        ct = compute_type(value.dtype)
        if is_static(length):
            lines.append(f"        {ct} {name}[{length}];  // one row")
            continue
        # a symbolic row: on the stack up to MAX_ROW elements, else one heap row per row
        # (its work then dwarfs the allocation)
        row = cexpr(length)
        lines += [
            f"        {ct} {name}_stack[{MAX_ROW}];",
            f"        std::unique_ptr<{ct}[]> {name}_heap;",
            f"        {ct}* {name} = {name}_stack;  // one row",
            f"        if ({row} > {MAX_ROW}LL) {{",
            f"            {name}_heap.reset(new {ct}[{row}]);",
            f"            {name} = {name}_heap.get();",
            "        }",
        ]
    for u, unit in enumerate(canon):
        w, r = plan.writes[u], plan.reads[u]
        # a small step in a kernel parallel over its inner loops stays on one thread: a
        # one-row kernel holds per-channel vectors beside an image-sized reduction
        inner = [st.inner_numel for _, st, _ in unit]
        unit_parallel = parallel_inner and not (
            not when and all(is_static(x) for x in inner) and rows * max(inner) < threshold  # type: ignore[operator]
        )
        if len(unit) == 1:
            n, st, names = unit[0]
            lines.extend(
                _step(
                    st,
                    n,
                    names,
                    params,
                    dtypes,
                    unit_parallel,
                    w,
                    r,
                    when if unit_parallel else "",
                )
            )
        else:
            lines.extend(
                _reduction_group(
                    unit, params, dtypes, unit_parallel, w, r, when if unit_parallel else ""
                )
            )
    lines.append("    }")
    lines.append("}")
    return "\n".join(lines), KernelSource(kernel.name, tuple(used), symbols)


def _joins(group: Sequence[tuple[int, Step]], step: Step) -> bool:
    """A reduction shares the group's loop if it has its shape and reads none of its results."""
    node = step.node
    first = group[0][1].node
    assert isinstance(node, ReductionNode) and isinstance(first, ReductionNode)
    if (node.out_sizes, node.red_sizes) != (first.out_sizes, first.red_sizes):
        return False
    written = {s.node.buf for _, s in group}
    return not any(ld.buf in written for ld in iter_loads(node.body))


def _reduction_group(  # noqa: PLR0917
    group: list[tuple[int, Step, list[str]]],
    params: dict[str, str],
    dtypes: dict[str, torch.dtype],
    parallel: bool,
    scratch_write: dict[VExpr, str],
    scratch_read: dict[VExpr, str],
    when: str = "",
) -> list[str]:
    """Several reductions of the same shape in one loop (their inputs loaded once)."""
    first = group[0][1]
    names = group[0][2]
    ind = "        "
    lines = [f"{ind}{{  // steps {', '.join(str(g[0]) for g in group)}: reductions, one loop"]
    lines += _var_defs(names[: first.split], first.outer_sizes, "o", ind + "    ")
    body = _Body(
        ind + "        ",
        params,
        dtypes,
        names[first.split :],
        ind + "    ",
        scratch_write,
        scratch_read,
    )
    parts = []
    for n, step, _ in group:
        node = step.node
        assert isinstance(node, ReductionNode)
        acc = f"acc{n}"
        parts.append(
            (node, acc, reduction_setup(node, acc, compute_type(node.dtype)), body.value(node.body))
        )
    lines += body.pre
    lines += [f"{ind}    {setup[0]}" for _, _, setup, _ in parts]
    clauses = " ".join(setup[2] for _, _, setup, _ in parts)
    loop = _var_defs(names[first.split :], first.inner_sizes, "ri", ind + "        ")
    loop += body.lines
    loop += [f"{ind}        " + setup[1].format(v=val) for _, _, setup, val in parts]
    accs = [(acc, compute_type(node.dtype), node.reduction) for node, acc, _, _ in parts]
    lines += _reduction_loop(ind, accs, clauses, when, first.inner_numel, loop, parallel)
    for node, acc, setup, _ in parts:
        if setup[3]:
            lines.append(f"{ind}    {setup[3]}")
        lines.append(f"{ind}    {params[node.buf]}[o] = {_store(dtypes[node.buf], acc)};")
    lines.append(f"{ind}}}")
    return lines


def _reduction_loop(  # noqa: PLR0917
    ind: str,
    accs: Sequence[tuple[str, str, str]],
    clause: str,
    when: str,
    n: Size,
    loop: list[str],
    parallel: bool,
) -> list[str]:
    """The inner reduction loop: long float sums in chunks (cascade.py), else one loop."""
    if wants_chunks([(ct, kind) for _, ct, kind in accs], n, parallel):
        return chunked_reduction(
            ind + "    ", accs, clause, when if parallel else None, int(n), loop
        )
    pragma = "#pragma omp parallel for simd" if parallel else "#pragma omp simd"
    head = f"{ind}    for (int64_t ri = 0; ri < {cexpr(n)}; ++ri) {{"
    return [f"{ind}    {pragma} {clause}{when if parallel else ''}", head, *loop, f"{ind}    }}"]


def _step(  # noqa: PLR0917
    step: Step,
    n: int,
    names: list[str],
    params: dict[str, str],
    dtypes: dict[str, torch.dtype],
    parallel: bool,
    scratch_write: dict[VExpr, str],
    scratch_read: dict[VExpr, str],
    when: str = "",
) -> list[str]:
    node = step.node
    ind = "        "
    lines = [f"{ind}{{  // step {n}: {type(node).__name__} -> {node.buf}"]
    lines += _var_defs(names[: step.split], step.outer_sizes, "o", ind + "    ")
    inner = step.inner_numel
    has_inner = len(step.inner_sizes) > 0
    if isinstance(node, PointwiseNode):
        store_idx = " + ".join(
            [cexpr(node.offset)]
            + [f"{v} * {cexpr(s)}" for v, s in zip(names, node.strides, strict=True) if s != 0]
        )
        body = _Body(
            ind + ("        " if has_inner else "    "),
            params,
            dtypes,
            names[step.split :],
            ind + "    ",
            scratch_write,
            scratch_read,
        )
        val = body.value(node.body)
        store = f"{body.indent}{params[node.buf]}[{store_idx}] = {_store(dtypes[node.buf], val)};"
        lines += body.pre
        if has_inner:
            pragma = "#pragma omp parallel for simd" if parallel else "#pragma omp simd"
            lines.append(f"{ind}    {pragma}{when if parallel else ''}")
            lines.append(f"{ind}    for (int64_t ri = 0; ri < {cexpr(inner)}; ++ri) {{")
            lines += _var_defs(names[step.split :], step.inner_sizes, "ri", ind + "        ")
            lines += body.lines
            lines.append(store)
            lines.append(f"{ind}    }}")
        else:
            lines += body.lines
            lines.append(store)
    else:
        acc = f"acc{n}"
        decl, combine, clause, final = reduction_setup(node, acc, compute_type(node.dtype))
        body = _Body(
            ind + "        ",
            params,
            dtypes,
            names[step.split :],
            ind + "    ",
            scratch_write,
            scratch_read,
        )
        val = body.value(node.body)
        lines += body.pre
        lines.append(f"{ind}    {decl}")
        loop = _var_defs(names[step.split :], step.inner_sizes, "ri", ind + "        ")
        loop += [*body.lines, f"{ind}        " + combine.format(v=val)]
        accs = [(acc, compute_type(node.dtype), node.reduction)]
        lines += _reduction_loop(ind, accs, clause, when, inner, loop, parallel)
        if final:
            lines.append(f"{ind}    {final}")
        lines.append(f"{ind}    {params[node.buf]}[o] = {_store(dtypes[node.buf], acc)};")
    lines.append(f"{ind}}}")
    return lines


def generate_cpp(
    kernels: Sequence[Kernel],
    buffers: dict[str, BufferSpec],
    parallel_threshold: int,
    *,
    libmvec: bool = False,
) -> tuple[str, list[KernelSource]]:
    """The translation unit for a graph's kernels, and each kernel's parameter list.

    ``libmvec``: declare libm's functions vectorisable (the library must then be linked
    with ``-lmvec``); without it sin/cos/log & co. stay scalar libm calls.
    """
    parts = [_PRELUDE + (LIBMVEC_DECLS if libmvec else "")]
    sources: list[KernelSource] = []
    for kernel in kernels:
        text, src = _kernel(kernel, buffers, parallel_threshold)
        parts.append(text)
        sources.append(src)
    return "\n\n".join(parts) + "\n", sources
