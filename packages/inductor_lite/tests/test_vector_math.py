"""Vectorised transcendental math (libmvec and our own polynomials) against eager.

Inputs span small, large and huge arguments and the IEEE special values, so a vector
variant that mishandles range reduction, NaN, infinities or the sign of zero fails here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from inductor_lite import InductorConfig
from inductor_lite.cache import cache_key, libmvec_available

_SPECIAL = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-30, -1e-30, 1e-40, 0.5, -0.5,
            1.0, -1.0, 1.5707964, 3.1415927, -3.1415927, 100.0, 105414.35, 1e6, 8388608.0,
            12345678.0, 1e20, -1e30, 3.4e38, -3.4e38]  # fmt: skip


def _wide(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    parts = [
        torch.tensor(_SPECIAL, dtype=torch.float64),
        torch.randn(4000, generator=g, dtype=torch.float64) * 3,
        torch.randn(4000, generator=g, dtype=torch.float64) * 1e4,
        (torch.rand(4000, generator=g, dtype=torch.float64) - 0.5) * 1e30,
    ]
    return torch.cat(parts).to(dtype)


def _assert_same(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    # NaN exactly where eager has NaN, infinities equal, the sign bit of every zero equal,
    # and the rest within a few ulp (libmvec is accurate to 4 ulp; eager's Sleef to 1)
    assert torch.equal(actual.isnan(), expected.isnan())
    finite = ~expected.isnan()
    a, e = actual[finite], expected[finite]
    assert torch.equal(a.isinf(), e.isinf())
    zero = e == 0
    assert torch.equal(torch.signbit(a[zero]), torch.signbit(e[zero]))
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(a, e, rtol=8 * eps, atol=8 * eps)


_UNARY = {
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": torch.log,
    "log2": torch.log2,
    "log1p": torch.log1p,
    "atan": torch.atan,
    "tanh": torch.tanh,
    "erf": torch.erf,
    "sigmoid": torch.sigmoid,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(_UNARY))
def test_unary_math_matches_eager_on_wide_range_and_special_values(
    name: str, dtype: torch.dtype, check: Any
) -> None:
    fn = _UNARY[name]
    x = _wide(dtype)
    # positive and negative halves: log & co. see their domain edges (0, -1, negatives)
    inputs = [torch.cat([x, x.abs(), -x.abs() - 1])]
    # check() compares with a loose tolerance first; the per-element test follows
    compiled = check(lambda t: fn(t), inputs, atol=1e-4, rtol=1e-4)
    _assert_same(compiled(*inputs), fn(*inputs), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow_and_atan2_match_eager_on_special_values(dtype: torch.dtype, check: Any) -> None:
    base = torch.tensor(_SPECIAL + [-2.0, 2.0, 0.1], dtype=dtype)
    expo = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.0, 2.0, -1.0, 3.0, float("nan"), float("inf"),
                         -float("inf"), 1.7], dtype=dtype)  # fmt: skip
    a, b = base[:, None].expand(-1, expo.numel()), expo.expand(base.numel(), -1)
    a, b = a.contiguous(), b.contiguous()
    compiled = check(
        lambda u, v: (torch.pow(u, v), torch.atan2(u, v)), [a, b], atol=1e-4, rtol=1e-4
    )
    for actual, expected in zip(compiled(a, b), (torch.pow(a, b), torch.atan2(a, b))):
        _assert_same(actual.flatten(), expected.flatten(), dtype)


def test_sin_cos_kernel_calls_libmvec_vector_variants(config: InductorConfig, check: Any) -> None:
    if not libmvec_available(config):
        pytest.skip("no libmvec with this compiler")
    x = torch.randn(64, 256)
    compiled = check(lambda t: torch.sin(t) * torch.cos(t + 1), [x])
    key = cache_key(compiled.kernel_source, config, ("-lmvec",))
    data = (config.cache_dir / f"{key}.so").read_bytes()
    # glibc's vector ABI names: _ZGV<isa>N<lanes>v_sinf
    assert b"v_sinf" in data
    assert b"v_cosf" in data
    # sin and cos of the same value must not become a scalar sincos call
    same = check(lambda t: torch.sin(t) * torch.cos(t), [x])
    data = (
        config.cache_dir / f"{cache_key(same.kernel_source, config, ('-lmvec',))}.so"
    ).read_bytes()
    assert b"v_sinf" in data
    assert b"v_cosf" in data
    assert b"sincos" not in data


def test_scalar_libm_path_still_matches_eager(config: InductorConfig, check: Any) -> None:
    cfg = dataclasses.replace(config, vector_libm=False)
    x = _wide(torch.float32)
    compiled = check(lambda t: torch.sin(t) + torch.log1p(t.abs()), [x], config=cfg)
    assert "declare simd" not in compiled.kernel_source
    expected = torch.sin(x) + torch.log1p(x.abs())
    _assert_same(compiled(x), expected, torch.float32)


def test_exp_near_underflow_and_masked_softmax_match_eager(check: Any) -> None:
    # the region where exp goes subnormal in eager: ours flushes under e^-87 (1.6e-38), an
    # absolute difference below 2e-38; a causal mask puts -inf into every masked softmax input
    x = torch.linspace(-110.0, -80.0, 3001)
    compiled = check(lambda t: torch.exp(t), [x], atol=2e-38, rtol=1e-6)
    assert torch.all(compiled(x)[x < -87.0] == 0)
    scores = torch.randn(4, 64, 64) * 30
    mask = torch.tril(torch.ones(64, 64, dtype=torch.bool))
    check(lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1), [scores, mask])


def test_float_tanh_is_within_5_ulp_of_float64_on_a_dense_grid(check: Any) -> None:
    # our rational tanh (cpp_prelude.py's vtanh): every float in [-10, 10] sampled densely, and tiny
    # ones, against float64's tanh rounded to float; eager (Sleef) stays within 1 ulp
    x = torch.cat([torch.linspace(-10, 10, 400_001), torch.logspace(-8, 1, 20_001)])
    x = torch.cat([x, -x[-20_001:]])
    compiled = check(lambda t: torch.tanh(t), [x], atol=1e-6, rtol=1e-6)
    exact = torch.tanh(x.double())
    ulp = (exact.float().abs().nextafter(torch.tensor(float("inf"))) - exact.float().abs()).double()
    err = (compiled(x).double() - exact).abs() / ulp
    assert err.max().item() <= 5.0
    assert ((torch.tanh(x).double() - exact).abs() / ulp).max().item() <= 1.0


def _ulp_error(y: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """``y``'s error in float ulps at the exact value (float64's result rounded to float)."""
    e = exact.float().abs()
    ulp = (e.nextafter(torch.tensor(float("inf"))) - e).double()
    return (y.double() - exact).abs() / ulp


def test_float_exp_and_sigmoid_are_within_a_few_ulp_of_float64_on_a_dense_grid(check: Any) -> None:
    # cpp_prelude.py's vexp (degree-6 polynomial, 2^k added to the exponent field) over its whole
    # normal range, densely, up to the overflow edge (88.72283 -> FLT_MAX region) and down to
    # the flush at -87; sigmoid is 1 / (1 + vexp(-x)). Eager (Sleef) stays within 1 ulp on
    # exp; its sigmoid (also exp, add, divide) reaches 2.3 ulp on this grid, as ours does.
    x = torch.cat([
        torch.linspace(-87.0, 88.72283, 600_001),
        torch.linspace(88.70, 88.72283, 20_001),
        torch.linspace(-87.0, -86.9, 20_001),
        torch.logspace(-10, 0, 20_001),
    ])  # fmt: skip
    x = torch.cat([x, -x[-20_001:]])
    compiled = check(lambda t: torch.exp(t), [x], atol=0.0, rtol=1e-6)
    y = compiled(x)
    assert torch.isfinite(y).all()
    assert _ulp_error(y, torch.exp(x.double())).max().item() <= 2.0
    assert _ulp_error(torch.exp(x), torch.exp(x.double())).max().item() <= 1.0
    s = torch.linspace(-30.0, 87.0, 400_001)
    compiled_sigmoid = check(lambda t: torch.sigmoid(t), [s], atol=1e-7, rtol=1e-6)
    assert _ulp_error(compiled_sigmoid(s), torch.sigmoid(s.double())).max().item() <= 3.0
    # past the edges: overflow to inf, flush to 0, NaN kept
    edge = torch.tensor([88.7229, 89.0, 1e30, float("inf"), -87.5, -1e30, -float("inf"),
                         float("nan")])  # fmt: skip
    out = check(lambda t: torch.exp(t), [edge], atol=2e-38, rtol=1e-6)(edge)
    assert torch.equal(out[:4], torch.full((4,), float("inf")))
    assert torch.equal(out[4:7], torch.zeros(3)) and out[7].isnan()


def test_float_exp_of_special_bit_patterns_matches_eager(check: Any) -> None:
    # vexp computes every lane unclamped and replaces out-of-range lanes at the end: NaNs with
    # any payload (whose bits would otherwise shift into the exponent), both signs of zero,
    # subnormals, FLT_MIN/FLT_MAX and the floats next to each edge must come out as eager's
    bits = torch.tensor([0x7FC00000, 0x7FC001FF, 0x7F800001, 0xFFC00000 - (1 << 32),
                         0x7FFFFFFF, 0x00000001, 0x807FFFFF - (1 << 32), 0x00800000,
                         0x7F7FFFFF, 0xFF7FFFFF - (1 << 32)], dtype=torch.int64)  # fmt: skip
    patterns = bits.to(torch.int32).view(torch.float32)
    edges = torch.tensor([88.72283, -87.0, 0.0, -0.0])
    near = torch.cat([edges.nextafter(torch.tensor(float("inf"))),
                      edges.nextafter(torch.tensor(-float("inf")))])  # fmt: skip
    x = torch.cat([patterns, edges, near, torch.tensor([1e-45, -1e-45, 1e-38, -1e-38])])
    y = check(lambda t: torch.exp(t), [x], atol=2e-38, rtol=2e-7)(x)
    want = torch.exp(x)
    assert torch.equal(y.isnan(), want.isnan())
    assert torch.equal(y.isinf(), want.isinf())
    assert torch.equal(y[x == 0], torch.ones(int((x == 0).sum())))
