"""A squeeze-excitation block's 1x1 convolutions on its pooled vector are lowered as
matrix-vector products in our kernels (aten's convolution call costs several times the
products), with eager's results: with and without bias, batch above 1, ReLU/hardsigmoid
(mobilenet_v3's) and SiLU/sigmoid (efficientnet's) blocks."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from inductor_lite.ir import FallbackNode


def _aten_convolutions(compiled: Any) -> int:
    return sum(
        isinstance(item, FallbackNode)
        and any(k in str(item.target) for k in ("convolution", "conv2d"))
        for item in compiled.items
    )


@pytest.mark.parametrize("batch", [1, 3])
def test_silu_sigmoid_block_matches_eager_without_aten_convolutions(batch: int, check: Any) -> None:
    x = torch.randn(batch, 48, 5, 5).contiguous(memory_format=torch.channels_last)
    fc1, b1 = torch.randn(12, 48, 1, 1), torch.randn(12)
    fc2 = torch.randn(48, 12, 1, 1)

    def se(t: torch.Tensor) -> torch.Tensor:
        s = F.silu(F.conv2d(t.mean((2, 3), keepdim=True), fc1, b1))
        return t * torch.sigmoid(F.conv2d(s, fc2))

    compiled = check(se, [x], atol=1e-4, rtol=1e-4)
    assert _aten_convolutions(compiled) == 0
    # the pool: a column sum (column_sum.py), not aten's mean
    assert "column-wise" in compiled.kernel_source
    assert not any(
        isinstance(item, FallbackNode) and "mean" in str(item.target) for item in compiled.items
    )


def test_relu_hardsigmoid_block_matches_eager_without_aten_convolutions(check: Any) -> None:
    x = torch.randn(1, 16, 6, 6).contiguous(memory_format=torch.channels_last)
    fc1, b1 = torch.randn(8, 16, 1, 1), torch.randn(8)
    fc2, b2 = torch.randn(16, 8, 1, 1), torch.randn(16)

    def se(t: torch.Tensor) -> torch.Tensor:
        s = F.relu(F.conv2d(t.mean((2, 3), keepdim=True), fc1, b1))
        return t * F.hardsigmoid(F.conv2d(s, fc2, b2))

    compiled = check(se, [x], atol=1e-4, rtol=1e-4)
    assert _aten_convolutions(compiled) == 0


def test_larger_images_and_kernels_stay_aten_convolutions(check: Any) -> None:
    x = torch.randn(1, 8, 4, 4)
    w = torch.randn(4, 8, 1, 1)
    compiled = check(lambda t: F.conv2d(t, w), [x], atol=1e-5, rtol=1e-5)
    assert _aten_convolutions(compiled) == 1
