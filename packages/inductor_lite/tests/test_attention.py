"""Attention on CPU: scaled_dot_product_attention stays aten's fused kernel (inference and
training), compared with eager and with torch.compile's inductor."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from inductor_lite import InductorConfig, compile_fx
from inductor_lite.ir import FallbackNode

FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def _qkv(*shape: int, requires_grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g).requires_grad_(requires_grad) for _ in range(3)]


def _masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # a padding mask with one fully masked key block, as transformers builds it
    mask = torch.zeros(2, 1, 32, 32)  # the test's sizes (symbolic_trace: no size queries)
    mask[..., -3:] = float("-inf")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _plain_then_projected(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = F.scaled_dot_product_attention(q * 0.5, k, v)
    return out.transpose(1, 2).reshape(2, 32, 64).relu()


CASES = [_masked, _causal, _plain_then_projected]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_attention_is_one_aten_flash_call_and_matches_eager(check: Any, fn: Any) -> None:
    c = check(fn, _qkv(2, 4, 32, 16), atol=1e-5, rtol=1e-5)
    calls = [i for i in c.items if isinstance(i, FallbackNode)]
    assert [i.target for i in calls] == [FLASH], [i.target for i in calls]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_attention_training_gradients_match_eager_and_torch_inductor(
    config: InductorConfig, fn: Any
) -> None:
    def run(compiled: Any) -> list[torch.Tensor]:
        q, k, v = _qkv(2, 4, 32, 16, requires_grad=True)
        out = compiled(q, k, v)
        out.backward(torch.ones_like(out))
        return [out.detach(), *(t.grad for t in (q, k, v) if t.grad is not None)]

    expected = run(fn)
    torch.compiler.reset()
    ours = run(torch.compile(fn, backend=lambda gm, ex: compile_fx(gm, ex, config=config)))
    torch.compiler.reset()
    theirs = run(torch.compile(fn, backend="inductor"))
    torch.compiler.reset()
    assert len(ours) == len(expected) == 4
    for a, b, e in zip(ours, theirs, expected, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b, e, atol=1e-5, rtol=1e-5)


def test_kernel_choices_channel_reports_attention_kept_as_aten(
    check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="strata.kernel_choices"):
        check(_causal, _qkv(2, 4, 32, 16), atol=1e-5, rtol=1e-5)
    lines = [r.getMessage() for r in caplog.records if r.name == "strata.kernel_choices"]
    assert any("_scaled_dot_product_flash_attention_for_cpu" in m and ": aten" in m for m in lines)
