"""Sums contiguous along their outputs (a channels-last pool, a sum over rows) are computed
column-wise -- the reduction loop outside, the outputs vectorised inside -- with eager's
results: several blocks of outputs, chunks of one dim or of the outermost of two, double.
(A squeeze-excitation block's pool, one block without chunks: test_squeeze_excitation.py.)"""

from __future__ import annotations

from typing import Any

import torch


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
