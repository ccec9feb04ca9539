"""Sums contiguous along their outputs (a channels-last pool, a sum over rows) are computed
column-wise -- the reduction loop outside, the outputs vectorised inside -- with eager's
results: one block of outputs or several, chunked or not, float and double."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from inductor_lite.ir import FallbackNode


def _aten_calls(compiled: Any) -> list[object]:
    return [item.target for item in compiled.items if isinstance(item, FallbackNode)]


def test_squeeze_excitation_pool_of_a_conv_output_matches_eager(check: Any) -> None:
    x = torch.randn(1, 32, 24, 24).contiguous(memory_format=torch.channels_last)
    w = torch.randn(32, 1, 3, 3)
    scale, fc1, fc2 = torch.rand(32, 1, 1) + 0.5, torch.randn(8, 32, 1, 1), torch.randn(32, 8, 1, 1)

    def se(t: torch.Tensor) -> torch.Tensor:
        y = F.silu(F.conv2d(t, w, padding=1, groups=32) * scale)
        s = torch.sigmoid(F.conv2d(F.silu(F.conv2d(y.mean((2, 3), keepdim=True), fc1)), fc2))
        return y * s

    compiled = check(se, [x], atol=1e-4, rtol=1e-4)
    assert "column-wise" in compiled.kernel_source
    assert torch.ops.aten.mean.dim not in _aten_calls(compiled)


def test_pool_of_few_terms_and_many_channels_matches_eager(check: Any) -> None:
    # 1152 channels of 3x3: one block, no chunks
    x = torch.randn(1, 1152, 3, 3).contiguous(memory_format=torch.channels_last)
    compiled = check(lambda t: torch.tanh(t).mean((2, 3), keepdim=True), [x])
    assert "column-wise" in compiled.kernel_source


def test_row_sums_over_many_rows_and_blocks_match_eager(check: Any) -> None:
    # 1000 outputs: two blocks of OUT_BLOCK; 65 rows: a chunk of ROW_CHUNK and a partial one
    # (under 65536 elements: larger column sums stay aten calls)
    x = torch.randn(65, 1000)
    compiled = check(lambda t: (t * 2).sum(0), [x], atol=1e-4, rtol=1e-5)
    assert "column-wise" in compiled.kernel_source


def test_double_column_sum_matches_eager(check: Any) -> None:
    x = torch.randn(1, 24, 16, 16, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last
    )
    compiled = check(lambda t: (t + 1).sum((2, 3)), [x])
    assert "column-wise" in compiled.kernel_source


def test_column_pool_error_against_float64_is_small(check: Any) -> None:
    # 48x48 terms per channel, all positive: chunks keep the float error near eager's
    x = (torch.rand(1, 16, 48, 48) + 1).contiguous(memory_format=torch.channels_last)
    compiled = check(lambda t: t.mean((2, 3)), [x])
    exact = x.double().mean((2, 3))
    ours = (compiled(x).double() - exact).abs().max().item()
    eager = (x.mean((2, 3)).double() - exact).abs().max().item()
    assert ours <= max(4 * eager, 1e-6)
