"""The C++ prelude of every CPU translation unit: type mapping, helpers, vector math."""

from __future__ import annotations

import torch

from .errors import LoweringError

__all__ = ["LIBMVEC_DECLS", "LIBMVEC_FUNCTIONS", "PRELUDE", "STORAGE", "compute_type"]

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

STORAGE = {
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
        return STORAGE[dtype]
    except KeyError:
        raise LoweringError(f"no C type for {dtype}") from None


PRELUDE = r"""
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
    // No clamp of x: out of [-87, 88.72283] (and for NaN) the lane's arithmetic is garbage
    // that the selects at the end replace, and it stays clear of subnormals (~20 vector
    // instructions per 16 floats instead of ~28: L2-resident, 85 -> 64 us per 256K floats).
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;
    const float ln2_lo = 1.42860682030941723212e-6f;
    // x / ln2 + 1.5 * 2^23 rounds to nearest integer (ulp 1 there), and that integer k sits in
    // t's low mantissa bits: t's bits << 23 are k << 23 (the shifter's own bits shift out)
    const float shifter = 12582912.0f;
    float t = std::fma(x, log2e, shifter);
    float k = t - shifter;
    float r = std::fma(-k, ln2_hi, x);
    r = std::fma(-k, ln2_lo, r);
    float p = 0.0013836727011948824f;
    p = std::fma(p, r, 0.008374898694455624f);
    p = std::fma(p, r, 0.041668232530355453f);
    p = std::fma(p, r, 0.16666419804096222f);
    p = std::fma(p, r, 0.49999991059303284f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    // 2^k added to p's exponent field (normal: k = -126 comes with p > 1, k = 128 with p < 1)
    uint32_t kbits = __builtin_bit_cast(uint32_t, t) << 23;
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
