"""Convolution epilogues folded into the convolution (conv_fold.py), checked against eager."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from inductor_lite import (
    CompiledGraph,
    InductorConfig,
    compile_aten_graph,
    conv_fold,
    conv_select,
)
from inductor_lite.ir import FallbackNode, PointwiseNode, ReductionNode, TensorRef
from inductor_lite.op_lowerings import convolutions
from inductor_lite.scheduler import iter_loads

aten = torch.ops.aten
pointwise_conv = torch.ops.mkldnn._convolution_pointwise.default
# the real costs, before any patch
_POST_OP_CALL_ELEMENTS = conv_fold._POST_OP_CALL_ELEMENTS
_GUARD_CALL_ELEMENTS = conv_fold._GUARD_CALL_ELEMENTS

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(),  # type: ignore[no-untyped-call]
    reason="oneDNN convolutions only",
)


def _targets(c: CompiledGraph) -> list[object]:
    return [n.target for n in c.lowered.nodes if isinstance(n, FallbackNode)]


@pytest.fixture(autouse=True)
def _channels_last_where_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where a weight is within 4x of its output the layout is timed on the machine running
    # (conv_select.py): these tests are about what follows the choice, so it is pinned (the
    # measuring test puts the real one back).
    monkeypatch.setattr(convolutions, "measured_conv", lambda *args: conv_select.DEFAULT)
    # these tests' activations are small: the post-op call's and the guard's fixed costs are
    # left out so that their chains fold (the costs themselves are tested below)
    monkeypatch.setattr(conv_fold, "_POST_OP_CALL_ELEMENTS", 0)
    monkeypatch.setattr(conv_fold, "_GUARD_CALL_ELEMENTS", 0)


def _nhwc(sizes: tuple[int, ...]) -> tuple[int, ...]:
    _, c, h, w = sizes
    return (h * w * c, 1, w * c, c)


class ConvBnRelu(nn.Module):
    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=bias)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=bias)
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


@pytest.mark.parametrize("bias", [False, True])
def test_conv_bn_relu_folds_into_one_onednn_call_per_stage(bias: bool, check: Any) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    c = check(ConvBnRelu(bias), [x], atol=1e-5, rtol=1e-4)
    convs = [
        n for n in c.lowered.nodes if isinstance(n, FallbackNode) and n.target == pointwise_conv
    ]
    assert len(convs) == 2
    assert aten.convolution.default not in _targets(c)
    for conv in convs:
        assert conv.args[7] == "relu"  # the ReLU is oneDNN's post-op
        act, weight = conv.args[0], conv.args[1]
        assert isinstance(act, TensorRef) and isinstance(weight, TensorRef)
        assert act.strides == _nhwc(act.sizes)
        assert weight.strides == _nhwc(weight.sizes)  # written channels-last by our kernel
    # no kernel writes an activation: the batch norm + ReLU passes are gone; the largest
    # write left is the input image's channels-last copy, the rest are weights and vectors
    for node in c.lowered.nodes:
        if isinstance(node, PointwiseNode):
            numel = 1
            for s in node.sizes:
                numel *= int(s)
            assert numel <= x.numel()


def test_weights_changed_between_calls_are_folded_again(config: InductorConfig) -> None:
    torch.manual_seed(0)
    model = ConvBnRelu(bias=True)
    gm = torch.fx.symbolic_trace(model)
    from inductor_lite import compile_fx

    x = torch.randn(2, 3, 16, 16)
    c = compile_fx(gm, [x], config=dataclasses.replace(config, use_aot=False))
    assert isinstance(c, CompiledGraph)
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x), atol=1e-5, rtol=1e-4)
        model.conv1.weight.mul_(-2.0)
        model.bn2.running_var.mul_(3.0)  # type: ignore[operator]
        model.bn2.weight.add_(0.25)
        model.conv2.bias.add_(1.0)  # type: ignore[union-attr]
        torch.testing.assert_close(c(x), model(x), atol=1e-5, rtol=1e-4)
    assert c.eager_calls == 0


def _conv_then(tail: Any, channels: int = 6) -> tuple[Any, list[torch.Tensor]]:
    torch.manual_seed(1)
    w = torch.randn(channels, 4, 3, 3)
    b = torch.randn(channels)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return tail(F.conv2d(x, w, b, padding=1))

    return fn, [torch.randn(2, 4, 8, 8)]


_SCALE = torch.rand(6, 1, 1) + 0.5
_SHIFT = torch.randn(1, 6, 1, 1)
_ONE = torch.tensor(1.5)


@pytest.mark.parametrize(
    ("name", "tail", "relu"),
    [
        ("relu only", F.relu, True),
        ("scale and shift", lambda y: y * _SCALE + _SHIFT, False),
        ("rsub and div", lambda y: F.relu((_SHIFT - y) / _SCALE), True),
        ("python scalars", lambda y: F.relu((y - 0.5) * 2 / 3 + 1), True),
        ("scalar tensor", lambda y: F.relu(_ONE * y - _ONE), True),
        ("reversed add", lambda y: F.relu(_SHIFT + _SCALE * y), True),
    ],
)
def test_affine_per_channel_chains_fold_and_match_eager(
    name: str, tail: Any, relu: bool, check: Any
) -> None:
    fn, inputs = _conv_then(tail)
    c = check(fn, inputs, atol=1e-5, rtol=1e-4)
    targets = _targets(c)
    if relu:
        assert targets.count(pointwise_conv) == 1, name
    else:  # folded into the weight and bias of a plain convolution: no epilogue kernel
        assert targets.count(aten.convolution.default) == 1, name
        assert not any(
            isinstance(n, PointwiseNode) and tuple(n.sizes) == (2, 8, 8, 6) for n in c.lowered.nodes
        ), name


@pytest.mark.parametrize(
    ("name", "tail"),
    [
        ("per-pixel operand", lambda y: F.relu(y * torch.linspace(0.5, 2, 8))),
        ("divided by the output", lambda y: F.relu(_SCALE / y)),
        ("division by zero", lambda y: F.relu(y / 0.0)),
        ("nonlinear first", lambda y: F.relu(torch.tanh(y) * _SCALE)),
    ],
)
def test_chains_that_are_not_per_channel_affine_are_left_alone(
    name: str, tail: Any, check: Any
) -> None:
    fn, inputs = _conv_then(tail)
    c = check(fn, inputs, atol=1e-5, rtol=1e-4)
    assert pointwise_conv not in _targets(c), name


def test_a_value_read_twice_inside_the_chain_is_not_folded(check: Any) -> None:
    def tail(y: torch.Tensor) -> torch.Tensor:
        z = y * _SCALE
        return F.relu(z + _SHIFT) + z  # z is needed unfolded

    fn, inputs = _conv_then(tail)
    c = check(fn, inputs, atol=1e-5, rtol=1e-4)
    assert pointwise_conv not in _targets(c)


_GUARD_FAILED = "a guard of the compiled code failed"


def test_finite_inputs_run_the_folded_code(check: Any, caplog: Any) -> None:
    fn, inputs = _conv_then(lambda y: F.relu(y * _SCALE + _SHIFT))
    with caplog.at_level("DEBUG", logger="strata.inductor_lite"):
        c = check(fn, inputs, atol=1e-5, rtol=1e-4)
    assert pointwise_conv in _targets(c)
    assert len(c.lowered.guards) == 1
    assert _GUARD_FAILED not in caplog.text


@pytest.mark.parametrize("bad", ["nan", "inf", "huge"])
def test_inputs_the_fold_could_get_wrong_run_the_graph_as_it_came(
    bad: str, check: Any, caplog: Any
) -> None:
    # oneDNN's ReLU turns NaN into 0 where eager keeps NaN, and folded weights overflow
    # differently: the guard (a bound on every folded result) sends these calls to the
    # unfolded graph, whose results are eager's
    fn, inputs = _conv_then(lambda y: F.relu(y * _SCALE + _SHIFT))
    x = inputs[0]
    if bad == "huge":
        x.mul_(1e37)  # finite, but a sum of products may overflow: not provably safe
    else:
        x[0, 1, 2, 3] = float(bad)
        x[1, 2, 5, 5] = -float("inf") if bad == "inf" else float("nan")
    with caplog.at_level("DEBUG", logger="strata.inductor_lite"):
        c = check(fn, [x], atol=1e-5, rtol=1e-4)  # compares NaN positions too (equal_nan)
    assert pointwise_conv in _targets(c)
    assert _GUARD_FAILED in caplog.text
    with torch.no_grad():
        want = fn(x)
        got = c(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    if bad == "nan":
        assert want.isnan().any()
    elif bad == "inf":
        assert want.isinf().any()


def test_a_nan_weight_is_caught_by_the_guard(check: Any, caplog: Any) -> None:
    torch.manual_seed(0)
    model = ConvBnRelu(bias=True)
    with torch.no_grad():
        model.bn2.running_var[3] = float("nan")  # type: ignore[index]
    with caplog.at_level("DEBUG", logger="strata.inductor_lite"):
        check(model, [torch.randn(2, 3, 16, 16)], atol=1e-5, rtol=1e-4)
    assert _GUARD_FAILED in caplog.text


def test_without_the_option_nothing_is_folded(check: Any, config: InductorConfig) -> None:
    cfg = dataclasses.replace(config, conv_fold_epilogue=False)
    c = check(ConvBnRelu(), [torch.randn(2, 3, 16, 16)], config=cfg, atol=1e-5, rtol=1e-4)
    assert pointwise_conv not in _targets(c)
    assert _targets(c).count(aten.convolution.default) == 2


def test_the_graph_given_is_not_changed(config: InductorConfig) -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    fn, inputs = _conv_then(lambda y: F.relu(y * _SCALE + _SHIFT))
    with torch.no_grad():
        gm = make_fx(fn)(*inputs)
    before = [n.target for n in gm.graph.nodes]
    c = compile_aten_graph(gm, inputs, config=config)
    assert isinstance(c, CompiledGraph)
    assert pointwise_conv in _targets(c)
    assert [n.target for n in gm.graph.nodes] == before  # eager fallback runs this graph
    with torch.no_grad():
        torch.testing.assert_close(c(*inputs), fn(*inputs), atol=1e-5, rtol=1e-4)


def test_pooling_a_channels_last_activation_is_a_column_sum(check: Any) -> None:
    torch.manual_seed(0)
    w = torch.randn(32, 8, 3, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.conv2d(x, w, padding=1)).mean(dim=(2, 3))

    c = check(fn, [torch.randn(4, 8, 24, 24)], atol=1e-5, rtol=1e-4)
    assert aten.mean.dim not in _targets(c)
    assert "column-wise" in c.kernel_source  # column_sum.py


def test_few_channel_input_goes_channels_last_through_aten(check: Any) -> None:
    w = torch.randn(8, 3, 3, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1)

    c = check(fn, [torch.randn(4, 3, 64, 64)])
    clones = [
        n for n in c.lowered.nodes if isinstance(n, FallbackNode) and n.target == aten.clone.default
    ]
    assert len(clones) == 1
    out = clones[0].outputs[0]
    assert out is not None and out.strides == _nhwc((4, 3, 64, 64))


def test_a_small_few_channel_image_goes_channels_last_through_our_kernel(check: Any) -> None:
    # 19200 elements: over the old 16K limit, under _OWN_COPY_NUMEL (aten's copy costs more
    # inside a model than our kernel)
    w = torch.randn(8, 3, 3, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1)

    c = check(fn, [torch.randn(1, 3, 80, 80)])
    assert aten.clone.default not in _targets(c)
    stores = [n for n in c.lowered.nodes if isinstance(n, PointwiseNode)]
    assert any(c.lowered.buffers[n.buf].strides == _nhwc((1, 3, 80, 80)) for n in stores)


@pytest.mark.parametrize("nan", [False, True])
def test_a_computed_input_is_bounded_where_it_is_computed(
    nan: bool, check: Any, caplog: Any
) -> None:
    torch.manual_seed(2)
    w = torch.randn(6, 4, 3, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.conv2d(torch.tanh(x) * 3, w, padding=1) * _SCALE + _SHIFT)

    x = torch.randn(2, 4, 8, 8)
    if nan:
        x[1, 0, 4, 4] = float("nan")
    with caplog.at_level("DEBUG", logger="strata.inductor_lite"):
        c = check(fn, [x], atol=1e-5, rtol=1e-4)
    assert pointwise_conv in _targets(c)
    assert (_GUARD_FAILED in caplog.text) == nan


def test_a_weight_larger_than_its_activation_is_not_folded(check: Any, caplog: Any) -> None:
    # a late stage at batch 1: 128x128x3x3 weights (147K) against a 2x2 output (512 values);
    # folding would write a new weight on every call to save one pass over 512 values
    torch.manual_seed(0)
    w, scale, shift = torch.randn(128, 128, 3, 3), torch.rand(1, 128, 1, 1) + 0.5, torch.randn(128)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.conv2d(x, w, padding=1) * scale + shift.view(1, -1, 1, 1))

    with caplog.at_level("DEBUG", logger="strata.kernel_choices"):
        c = check(fn, [torch.randn(1, 128, 2, 2)], atol=1e-4, rtol=1e-4)
    assert pointwise_conv not in _targets(c)
    assert not c.lowered.guards
    assert "not folded" in caplog.text


def test_an_affine_chain_a_pointwise_op_absorbs_is_not_folded(check: Any) -> None:
    # batch norm then SiLU: the affine joins the SiLU's own pass, folding would save nothing
    fn, inputs = _conv_then(lambda y: F.silu(y * _SCALE + _SHIFT))
    c = check(fn, inputs, atol=1e-5, rtol=1e-4)
    assert _targets(c).count(aten.convolution.default) == 1
    assert not c.lowered.guards


def test_a_squeeze_excitation_pool_reads_the_activation_stored_channels_last(
    check: Any,
) -> None:
    # conv -> SiLU -> mean over H, W -> scale the activation: the SiLU is stored once
    # (channels-last, as the convolution wrote it) and averaged by a column-wise sum
    # (column_sum.py), which vectorises across the channels, instead of a strided gather
    torch.manual_seed(0)
    w, w2 = torch.randn(32, 16, 3, 3), torch.randn(32, 32) * 0.1

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = F.silu(F.conv2d(x, w, padding=1))
        s = torch.sigmoid(y.mean((2, 3)) @ w2)
        return y * s[:, :, None, None]

    c = check(fn, [torch.randn(2, 16, 16, 16)], atol=1e-4, rtol=1e-4)
    sums = [n for n in c.lowered.nodes if isinstance(n, ReductionNode)]
    assert len(sums) == 1 and "column-wise" in c.kernel_source
    (act,) = {ld.buf for ld in iter_loads(sums[0].body)}
    spec = c.lowered.buffers[act]
    assert spec.strides == _nhwc(spec.sizes)


def test_a_convolution_plan_is_measured_once_and_cached(
    check: Any,
    config: InductorConfig,
    caplog: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the layout and kernel are timed at compile time; the answer is kept beside the kernels
    # and reused
    monkeypatch.setattr(convolutions, "measured_conv", conv_select.measured_conv)
    torch.manual_seed(0)
    w = torch.randn(16, 16, 3, 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(torch.relu(x), w, padding=1)

    x = torch.randn(1, 16, 8, 8)
    cfg = dataclasses.replace(config, cache_dir=tmp_path)  # nothing measured there yet
    with caplog.at_level("DEBUG", logger="strata.inductor_lite"):
        check(fn, [x], config=cfg, atol=1e-4, rtol=1e-4)
    assert "(measured)" in caplog.text
    saved = (tmp_path / "conv_layouts.json").read_text()
    assert "(1, 16, 8, 8)" in saved
    caplog.clear()
    conv_select._MEMO.clear()  # a new process: the file answers, nothing is timed
    with caplog.at_level("DEBUG", logger="strata.inductor_lite"):
        check(fn, [x], config=cfg, atol=1e-4, rtol=1e-4)
    assert "(measured)" not in caplog.text


def test_kernel_choices_channel_reports_each_convolution_decision(check: Any, caplog: Any) -> None:
    model = nn.Sequential(
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16),
    ).eval()  # fmt: skip
    with caplog.at_level("DEBUG", logger="strata.kernel_choices"):
        check(model, [torch.randn(1, 8, 16, 16)], atol=1e-4, rtol=1e-4)
    lines = [r.getMessage() for r in caplog.records if r.name == "strata.kernel_choices"]
    # a folding decision per convolution and the unfolded one's layout, each with its reason
    assert any("w(16, 1, 3, 3): nhwc/aten (timed" in m for m in lines), lines
    assert sum("epilogue" in m and "elements of traffic" in m for m in lines) == 2, lines


@pytest.mark.parametrize(("size", "folded"), [(8, False), (64, True)])
def test_a_relu_is_onednn_post_op_only_where_the_output_pays_for_its_call(
    size: int, folded: bool, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # oneDNN's convolution with a post-op costs ~35 us more per call than the plain one:
    # a 2x8x8x16 output keeps conv -> (batch norm + ReLU kernel); a 2x64x64x16 one folds
    monkeypatch.setattr(conv_fold, "_POST_OP_CALL_ELEMENTS", _POST_OP_CALL_ELEMENTS)
    monkeypatch.setattr(conv_fold, "_GUARD_CALL_ELEMENTS", _GUARD_CALL_ELEMENTS)
    torch.manual_seed(0)
    w, b = torch.randn(16, 4, 3, 3), torch.randn(16)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.conv2d(x, w, b, padding=1) * _SCALE.repeat(3, 1, 1)[:16] + 0.5)

    c = check(fn, [torch.randn(2, 4, size, size)], atol=1e-5, rtol=1e-4)
    targets = _targets(c)
    assert (pointwise_conv in targets) == folded
    assert (aten.convolution.default in targets) == (not folded)


def test_folds_saving_less_than_the_guard_costs_are_not_made(
    check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one small fold without a ReLU (scale and shift before a plain consumer) saves a few
    # thousand elements of traffic: the guard's bound and its per-call read cost more
    monkeypatch.setattr(conv_fold, "_GUARD_CALL_ELEMENTS", _GUARD_CALL_ELEMENTS)
    fn, inputs = _conv_then(lambda y: y * _SCALE + _SHIFT)
    c = check(fn, inputs, atol=1e-5, rtol=1e-4)
    assert not c.lowered.guards
    assert aten.convolution.default in _targets(c)
