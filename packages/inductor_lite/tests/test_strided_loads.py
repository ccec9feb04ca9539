"""Inner loops reading with a large constant stride (a channels-last buffer read in NCHW
order) hold the stride in an opaque variable, so GCC vectorises them: results as eager's."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def test_transposed_read_of_a_channels_last_input_matches_eager(check: Any) -> None:
    x = torch.randn(2, 32, 12, 12).contiguous(memory_format=torch.channels_last)
    b = torch.randn(32, 1, 1)
    compiled = check(lambda t, u: F.silu(t * 1.5 + u).contiguous(), [x, b])
    assert '__asm__("" : "+r"' in compiled.kernel_source  # the stride 32 along w
    assert compiled(x, b).is_contiguous()


def test_negative_and_small_strides_match_eager(check: Any) -> None:
    x = torch.randn(40, 64)
    # a flipped transposed read (negative stride 64 along the inner loop) and a stride-2 read
    flipped = check(lambda t: torch.sigmoid(t.t().flip(1)).contiguous(), [x])
    assert "__asm__" in flipped.kernel_source
    compiled = check(lambda t: torch.exp(t[:, ::2]) + 1, [x])
    assert "(r0 * 2LL)" in compiled.kernel_source  # small strides keep the literal
    assert "__asm__" not in compiled.kernel_source


def test_strided_reduction_over_channels_last_matches_eager(check: Any) -> None:
    # a spatial mean read along w of a channels-last buffer (stride = channels)
    x = torch.randn(1, 48, 9, 9).contiguous(memory_format=torch.channels_last)
    check(lambda t: torch.tanh(t).mean(dim=(2, 3)), [x], atol=1e-5, rtol=1e-5)
