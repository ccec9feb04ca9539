"""Convolution plans (conv_select.py): each layout and aten kernel gives eager's values, and
the timed choice is sound."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from inductor_lite import InductorConfig, conv_select
from inductor_lite.conv_select import Algorithm, ConvPlan, Layout
from inductor_lite.ir import FallbackNode, TensorRef
from inductor_lite.op_lowerings import convolutions

aten = torch.ops.aten
_TARGETS = {
    Algorithm.ATEN: aten.convolution.default,
    Algorithm.ONEDNN: aten.mkldnn_convolution.default,
    Algorithm.THNN: aten._slow_conv2d_forward.default,
}
_FAST = {
    Algorithm.ATEN: torch.convolution,
    Algorithm.ONEDNN: torch.mkldnn_convolution,
    Algorithm.THNN: torch._C._nn.thnn_conv2d,
}


def _nhwc(sizes: tuple[int, ...]) -> tuple[int, ...]:
    _, c, h, w = sizes
    return (h * w * c, 1, w * c, c)


def _contiguous(sizes: tuple[int, ...]) -> tuple[int, ...]:
    _, c, h, w = sizes
    return (c * h * w, h * w, w, 1)


@pytest.mark.parametrize("plan", conv_select.candidates(1, (1, 1)), ids=str)
@pytest.mark.parametrize(("k", "stride", "bias"), [(3, 1, True), (1, 2, False), (3, 2, True)])
def test_every_plan_matches_eager_with_operands_in_its_layout(
    plan: ConvPlan, k: int, stride: int, bias: bool, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(convolutions, "measured_conv", lambda *args: plan)
    torch.manual_seed(0)
    w = torch.randn(12, 8, k, k)
    b = torch.randn(12) if bias else None

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.conv2d(torch.tanh(x), w, b, stride, k // 2)) + 1

    c = check(fn, [torch.randn(1, 8, 10, 10)], atol=1e-5, rtol=1e-5)
    convs = [n for n in c.lowered.nodes if isinstance(n, FallbackNode)]
    assert [n.target for n in convs] == [_TARGETS[plan.algorithm]]
    x, weight = convs[0].args[0], convs[0].args[1]
    assert isinstance(x, TensorRef) and isinstance(weight, TensorRef)
    want = _nhwc if plan.layout is Layout.NHWC else _contiguous
    assert x.strides == want(x.sizes)
    if k > 1:  # a 1x1 weight is both
        assert weight.strides == want(weight.sizes)
    out = convs[0].outputs[0]
    assert out is not None and out.strides == want(out.sizes)
    # the wrapper calls the convolution through its torch function (a cheaper binding)
    assert _FAST[plan.algorithm] in c.run.__globals__.values()


@pytest.mark.parametrize("plan", conv_select.candidates(2, (2, 2)), ids=str)
def test_grouped_dilated_plans_match_eager(
    plan: ConvPlan, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(convolutions, "measured_conv", lambda *args: plan)
    torch.manual_seed(0)
    w = torch.randn(8, 4, 3, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x * 2, w, None, 1, 2, 2, 2)

    check(fn, [torch.randn(1, 8, 9, 11)], atol=1e-5, rtol=1e-5)


def test_thnn_is_offered_only_without_groups_and_dilation() -> None:
    thnn = ConvPlan(Layout.NHWC, Algorithm.THNN)
    assert thnn in conv_select.candidates(1, (1, 1))
    assert thnn not in conv_select.candidates(2, (1, 1))
    assert thnn not in conv_select.candidates(1, (2, 2))


def test_an_nchw_plan_must_win_by_the_margin() -> None:
    nhwc, nchw = conv_select.DEFAULT, ConvPlan(Layout.NCHW, Algorithm.ONEDNN)
    assert conv_select._pick({nhwc: 1.0, nchw: 0.97}) == nhwc
    assert conv_select._pick({nhwc: 1.0, nchw: 0.85}) == nchw
    # a grouped convolution's NCHW plan must win by more (its activations' reorders)
    assert conv_select._pick({nhwc: 1.0, nchw: 0.85}, groups=4) == nhwc
    assert conv_select._pick({nhwc: 1.0, nchw: 0.7}, groups=4) == nchw
    assert conv_select._pick({nhwc: 1.0, nchw: 0.5}) == nchw
    assert conv_select._pick({nhwc: 0.5, nchw: 1.0}) == nhwc
    assert conv_select._pick({}) == conv_select.DEFAULT


def test_a_plan_with_wrong_values_is_never_timed_or_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    real = conv_select.call_target

    def broken(plan: ConvPlan, *args: Any) -> Any:
        target, a = real(plan, *args)
        if plan.algorithm is Algorithm.THNN:
            return (lambda *t: target(*t) + 1), a
        return target, a

    monkeypatch.setattr(conv_select, "call_target", broken)
    times = conv_select._time_plans(
        conv_select.candidates(1, (1, 1)), (1, 8, 6, 6), (8, 8, 1, 1), (1, 1), (0, 0),
        (1, 1), 1, False,
    )  # fmt: skip
    assert ConvPlan(Layout.NHWC, Algorithm.THNN) not in times
    assert conv_select.DEFAULT in times


def test_a_measured_plan_is_stored_and_read_back(tmp_path: Any) -> None:
    args = ((1, 8, 6, 6), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), 1, True)
    plan = conv_select.measured_conv(tmp_path, *args)
    assert plan in conv_select.candidates(1, (1, 1))
    assert str(plan) in (tmp_path / "conv_layouts.json").read_text()
    conv_select._MEMO.clear()
    assert conv_select.measured_conv(tmp_path, *args) == plan


def test_the_timed_plan_runs_in_the_graph_and_matches_eager(
    check: Any, config: InductorConfig, tmp_path: Any
) -> None:
    torch.manual_seed(0)
    w = torch.randn(64, 32, 3, 3)
    cfg = dataclasses.replace(config, cache_dir=tmp_path)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(torch.relu(x), w, padding=1).sigmoid()

    check(fn, [torch.randn(1, 32, 4, 4)], config=cfg, atol=1e-4, rtol=1e-4)
    assert (
        "nhwc/" in (tmp_path / "conv_layouts.json").read_text()
        or "nchw/" in (tmp_path / "conv_layouts.json").read_text()
    )


@pytest.mark.parametrize(("cin", "hoisted"), [(8, True), (64, False)])
def test_a_large_weight_copy_runs_next_to_its_convolution(
    cin: int, hoisted: bool, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each channels-last weight copy of 32 x cin x 3x3: small ones (2304 elements) run
    # together in front of the convolutions; large ones (18432) each just before its own
    # convolution, where the copy is still in cache when the convolution reads it
    monkeypatch.setattr(convolutions, "measured_conv", lambda *args: conv_select.DEFAULT)
    torch.manual_seed(0)
    w1, w2 = torch.randn(cin, cin, 3, 3) * 0.1, torch.randn(cin, cin, 3, 3) * 0.1

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(F.conv2d(torch.relu(x), w1, padding=1))
        return F.conv2d(y, w2, padding=1)

    c = check(fn, [torch.randn(1, cin, 6, 6)], atol=1e-4, rtol=1e-4)
    from inductor_lite.scheduler import Kernel

    order = [
        "conv" if isinstance(item, FallbackNode) else "copy"
        for item in c.items
        for step in (item.steps if isinstance(item, Kernel) else [None])
        if step is None or tuple(step.node.sizes) == (cin, 3, 3, cin)
    ]
    assert order == (
        ["copy", "copy", "conv", "conv"] if hoisted else ["copy", "conv", "copy", "conv"]
    )
