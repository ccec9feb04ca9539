"""Memory layouts: channels-last convolutions, outputs in eager's layout, small broadcasts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from inductor_lite import CompiledGraph, InductorConfig, conv_select
from inductor_lite.ir import FallbackNode, PointwiseNode, TensorRef
from inductor_lite.op_lowerings import convolutions

aten = torch.ops.aten


def _nhwc(sizes: tuple[int, ...]) -> tuple[int, ...]:
    n, c, h, w = sizes
    del n
    return (h * w * c, 1, w * c, c)


_CONV_TARGETS = (aten.convolution.default, torch.ops.mkldnn._convolution_pointwise.default)


def _convs(c: CompiledGraph) -> list[FallbackNode]:
    """The convolutions, plain or with a folded epilogue (both take the input first)."""
    return [n for n in c.lowered.nodes if isinstance(n, FallbackNode) and n.target in _CONV_TARGETS]


@pytest.fixture(autouse=True)
def _channels_last_where_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where a weight is within 4x of its output the layout is timed on the machine running
    # (conv_select.py); these tests are about the channels-last path, so that choice is pinned.
    monkeypatch.setattr(convolutions, "measured_conv", lambda *args: conv_select.DEFAULT)


class ConvBnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)  # type: ignore[operator]
            bn.running_var.uniform_(0.5, 2.0)  # type: ignore[operator]
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        out: torch.Tensor = x.mean(dim=(2, 3))
        return out


def test_conv_bn_relu_runs_channels_last_and_matches_eager(check: Any, config: Any) -> None:
    torch.manual_seed(0)
    model = ConvBnRelu()
    x = torch.randn(2, 3, 16, 16)
    # unfolded (test_conv_fold.py has the folded form): batch norm + ReLU is a kernel
    cfg = dataclasses.replace(config, conv_fold_epilogue=False)
    c = check(model, [x], config=cfg, atol=1e-5, rtol=1e-4)
    convs = _convs(c)
    assert len(convs) == 2
    for conv in convs:
        arg = conv.args[0]
        assert isinstance(arg, TensorRef)
        assert arg.strides == _nhwc(arg.sizes)  # oneDNN gets an NHWC input
        out = conv.outputs[0]
        assert out is not None
        # the strides the wrapper expects are the ones oneDNN really returns for that input
        probe = torch.empty_strided(arg.sizes, arg.strides)
        weight = torch.randn(out.sizes[1], arg.sizes[1], 3, 3)
        real = F.conv2d(probe, weight, stride=conv.args[3], padding=conv.args[4])
        assert out.strides == tuple(real.stride())
    # the batch-norm + ReLU between the convolutions is written in NHWC order: its node
    # loops over (n, h, w, c) with contiguous stores
    middle = [
        n for n in c.lowered.nodes if isinstance(n, PointwiseNode) and n.sizes == (2, 16, 16, 8)
    ]
    assert len(middle) == 1
    assert middle[0].full_store


def test_without_channels_last_the_convolution_gets_nchw(check: Any, config: Any) -> None:
    torch.manual_seed(0)
    model = ConvBnRelu()
    cfg = dataclasses.replace(config, conv_channels_last=False)
    c = check(model, [torch.randn(2, 3, 16, 16)], config=cfg, atol=1e-5, rtol=1e-4)
    for conv in _convs(c):
        arg = conv.args[0]
        assert isinstance(arg, TensorRef)
        assert arg.strides != _nhwc(arg.sizes)


@pytest.mark.parametrize("relu", [False, True])
def test_returned_convolution_result_has_eagers_layout(relu: bool, config: InductorConfig) -> None:
    torch.manual_seed(0)
    w, b = torch.randn(6, 4, 3, 3), torch.randn(6)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x * 2, w, b, padding=1)
        return F.relu(y) if relu else y

    from inductor_lite import compile_fx

    x = torch.randn(2, 4, 8, 8)
    cfg = dataclasses.replace(config, use_aot=False)
    c = compile_fx(torch.fx.symbolic_trace(fn), [x], config=cfg)
    with torch.no_grad():
        expected = fn(x)
        actual = c(x)
    assert isinstance(c, CompiledGraph) and c.eager_calls == 0
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert actual.stride() == expected.stride() == (384, 64, 8, 1)
    assert _convs(c)[0].args[0].strides == _nhwc((2, 4, 8, 8))  # type: ignore[union-attr]


def test_channels_last_input_is_not_copied_and_output_stays_channels_last(check: Any) -> None:
    torch.manual_seed(0)
    w = torch.randn(6, 4, 3, 3)
    x = torch.randn(2, 4, 8, 8).contiguous(memory_format=torch.channels_last)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1)

    c = check(fn, [x])
    # no layout copy of an input that is already NHWC (the weight's is the one kernel)
    written = [n for n in c.lowered.nodes if isinstance(n, PointwiseNode)]
    assert [tuple(n.sizes) for n in written] == [(6, 3, 3, 4)]
    with torch.no_grad():
        assert c(x).stride() == fn(x).stride() == _nhwc((2, 6, 8, 8))


@pytest.mark.parametrize(
    ("groups", "stride", "dilation", "dtype"),
    [
        (1, 1, 1, torch.float32),
        (2, 2, 1, torch.float32),
        (4, 1, 2, torch.float32),
        (1, 2, 1, torch.float64),
    ],
)
def test_convolution_variants_match_eager(
    groups: int, stride: int, dilation: int, dtype: torch.dtype, check: Any
) -> None:
    torch.manual_seed(0)
    w = torch.randn(8, 8 // groups, 3, 3, dtype=dtype)
    b = torch.randn(8, dtype=dtype)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(torch.tanh(x), w, b, stride, 2, dilation, groups)
        return torch.sigmoid(y) + 1

    check(fn, [torch.randn(2, 8, 11, 9, dtype=dtype)], atol=1e-5, rtol=1e-5)


def test_per_channel_batch_norm_scale_is_computed_once(check: Any) -> None:
    torch.manual_seed(0)
    mean, var = torch.randn(32), torch.rand(32) + 0.5
    weight, bias = torch.randn(32), torch.randn(32)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.batch_norm(x, mean, var, weight, bias, training=False))

    c = check(fn, [torch.randn(4, 32, 16, 16)], atol=1e-5, rtol=1e-5)
    small = [n for n in c.lowered.nodes if isinstance(n, PointwiseNode) and n.sizes == (32, 1, 1)]
    assert len(small) == 1  # 1 / sqrt(var + eps), stored per channel
    # the big kernel reads it instead of taking a square root per element
    big = c.kernel_source[c.kernel_source.rindex('extern "C" void kernel') :]
    assert "sqrt" not in big
    assert c.kernel_count == 2


def test_transposed_key_is_copied_along_rows_and_handed_to_bmm_as_a_view(check: Any) -> None:
    torch.manual_seed(0)
    b, t, h, d = 2, 16, 4, 8

    def attn_scores(qkv: torch.Tensor) -> torch.Tensor:
        q, k, _ = qkv.split(h * d, dim=-1)
        q = q.view(b, t, h, d).transpose(1, 2)
        k = k.view(b, t, h, d).transpose(1, 2)
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1)

    c = check(attn_scores, [torch.randn(b, t, 3 * h * d)], atol=1e-5, rtol=1e-5)
    bmms = [n for n in c.lowered.nodes if isinstance(n, FallbackNode) and "bmm" in str(n.target)]
    assert len(bmms) == 1
    kt = bmms[0].args[1]
    assert isinstance(kt, TensorRef)
    # k^T (b * h, d, t) is a transposed view of k stored as (b, h, t, d): unit stride on d
    assert kt.sizes == (b * h, d, t)
    assert kt.strides == (t * d, 1, d)
    # the copy that stores k loops with d innermost, reading qkv's rows
    writer = next(n for n in c.lowered.nodes if isinstance(n, PointwiseNode) and n.buf == kt.buf)
    assert writer.sizes == (b, h, t, d)


def test_reshape_that_merges_the_unit_stride_dim_keeps_logical_order(check: Any) -> None:
    def merge_heads(y: torch.Tensor) -> torch.Tensor:
        # (b, h, t, d) -> (b, t, h * d): the copy is plain row-major, no transposed layout
        return (y.transpose(1, 2).reshape(2, 16, 32) @ torch.ones(32, 4)).relu()

    c = check(merge_heads, [torch.randn(2, 4, 16, 8)])
    mms = [n for n in c.lowered.nodes if isinstance(n, FallbackNode)]
    arg = mms[0].args[0]
    assert isinstance(arg, TensorRef)
    assert arg.strides[-1] == 1


def test_output_stored_early_in_another_layout_is_returned_in_eagers_layout(
    check: Any,
) -> None:
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x
        for _ in range(13):  # too costly to inline into two consumers: stored (contiguous)
            y = y * 1.5 + 0.5
        return y, torch.cumsum(y, 1)  # eager's y is channels-last, like x

    c = check(fn, [x])
    with torch.no_grad():
        got, want = c(x), fn(x)
    assert got[0].stride() == want[0].stride() == _nhwc((2, 3, 4, 5))
