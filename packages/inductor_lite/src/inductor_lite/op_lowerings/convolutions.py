"""Convolutions in channels-last layout on CPU.

A 2-d convolution stays an aten call (oneDNN), but oneDNN's NCHW path reorders its input to
its blocked layout and back on every call, while a channels-last (NHWC) input is used as is:
on one core the three convolutions of a small CNN took 2.6 ms in NCHW and 1.1 ms in NHWC
(8x3x64x64 input). So the convolution's input is stored channels-last. When the input is a
computed value (batch norm + ReLU of the previous convolution) that costs nothing extra: the
kernel that computes it writes it in NHWC order. A stored NCHW input is copied once
(cheap against the saving: 0.04 ms for the 8x3x64x64 image). oneDNN then returns a
channels-last result, which the kernels after it read through its strides; a graph output
keeps eager's layout (the output rule copies it back when it is returned). At batch 1 neither
layout nor aten's own kernel choice wins everywhere (a late ResNet stage's weight dwarfs its
activation), so each convolution's layout and kernel are timed once per shape
(conv_select.py) and the plan that wins is lowered.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.fx

from ..choices import choice
from ..conv_select import DEFAULT, ConvPlan, Layout, call_target, measured_conv
from ..ir import (
    FallbackNode,
    IConst,
    IExpr,
    Op,
    TensorRef,
    VExpr,
    VOp,
    contiguous_strides,
)
from ..symbolic import is_static
from ..tensorvalue import (
    TensorValue,
    realized,
)
from .registry import (
    aten,
    meta,
    register,
)

if TYPE_CHECKING:
    from ..graph_lowering import GraphLowering

__all__ = ["channels_last_strides"]


log = logging.getLogger("strata.inductor_lite")


def channels_last_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """NHWC strides for NCHW ``sizes`` (4-d)."""
    n, c, h, w = sizes
    del n
    return (h * w * c, 1, w * c, c)


def _is_channels_last(tv: TensorValue) -> bool:
    ref = tv.ref
    if ref is None:
        return False
    want = channels_last_strides(tv.sizes)
    # dims of one element may carry any stride
    return all(s <= 1 or a == b for s, a, b in zip(tv.sizes, ref.strides, want, strict=True))


def _eligible(L: GraphLowering, node: torch.fx.Node, x: TensorValue, weight: TensorValue) -> bool:
    val = meta(node)
    return (
        L.config.conv_channels_last
        and all(is_static(s) for s in (*x.sizes, *weight.sizes))
        and x.ndim == 4
        and weight.ndim == 4
        and isinstance(val, torch.Tensor)
        and val.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and all(is_static(s) for s in (*val.shape, *val.stride()))
        and bool(torch.backends.mkldnn.is_available())  # type: ignore[no-untyped-call]
    )


# Below this many channels a stored value (of _OWN_COPY_NUMEL elements or more) goes
# channels-last through aten's copy: our row kernel's inner loop runs over the channels, too
# short to vectorise (the 8x3x64x64 image: 95 us in our kernel, 40 us in aten's)
_FEW_CHANNELS = 8
# Under this many elements our kernel copies anyway: inside a model aten's call costs far
# more than alone (efficientnet_b0's 1x3x96x96 image: aten 109 us in the model, 24 us
# alone; our kernel 26 us in the model)
_OWN_COPY_NUMEL = 32768


def _channels_last(L: GraphLowering, tv: TensorValue) -> TensorValue:
    if _is_channels_last(tv):
        return tv
    strides = channels_last_strides(tv.sizes)
    if tv.ref is None or int(tv.sizes[1]) >= _FEW_CHANNELS or int(tv.numel) < _OWN_COPY_NUMEL:
        return L.realize(tv, strides)
    spec = L.new_buffer(tv.sizes, tv.dtype, strides)
    kwargs = (("memory_format", torch.channels_last),)
    L.nodes.append(FallbackNode(aten.clone.default, (tv.ref,), kwargs, (spec,), False))
    return realized(TensorRef(spec.name, spec.sizes, spec.strides, 0, spec.dtype))


def _plan(L: GraphLowering, node: torch.fx.Node, weight: TensorValue) -> ConvPlan:
    """The layout and aten kernel for this convolution, timed once per shape
    (conv_select.py). A channels-last plan copies a stored NCHW weight on every call (a
    weight is a graph input); that copy is part of what is timed."""
    x_val = meta(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    what = f"convolution {node.name} w{tuple(weight.sizes)}"
    if not isinstance(x_val, torch.Tensor) or len(node.args) != 9:
        choice(what, str(DEFAULT), "not timed: unusual arguments")
        return DEFAULT
    _, _, _, stride, padding, dilation, _, _, groups = node.args
    weight_copy = weight.ref is not None and not _is_channels_last(weight)
    plan = measured_conv(
        L.config.cache_dir,
        tuple(int(s) for s in x_val.shape),
        tuple(int(s) for s in weight.sizes),
        stride,  # type: ignore[arg-type]
        padding,  # type: ignore[arg-type]
        dilation,  # type: ignore[arg-type]
        int(groups),  # type: ignore[arg-type]
        weight_copy,
    )
    choice(what, str(plan), "timed once per shape (conv_layouts.json)")
    return plan


def _out_strides(node: torch.fx.Node) -> tuple[int, ...]:
    val = meta(node)
    assert isinstance(val, torch.Tensor)
    out_sizes = tuple(int(s) for s in val.shape)
    # oneDNN answers a channels-last input with a channels-last result (checked on every
    # call by the wrapper's restride, which copies if it ever did not)
    strides = channels_last_strides(out_sizes)
    if strides == contiguous_strides(out_sizes):
        strides = tuple(int(s) for s in val.stride())
    log.debug("channels-last convolution -> %s", out_sizes)
    return strides


# At most this many images: a squeeze-excitation block's 1x1 convolutions on its pooled
# vector are matrix-vector products, where aten's convolution call (15-40 us at batch 1,
# efficientnet_b0's 1152x48) costs several times the products themselves
_MATVEC_BATCH = 8


def _pointwise_on_one_pixel(
    x: TensorValue, weight: TensorValue, padding: Sequence[int], groups: int
) -> bool:
    n, _, h, w = (int(s) for s in x.sizes)
    _, _, kh, kw = (int(s) for s in weight.sizes)
    return (
        n <= _MATVEC_BATCH
        and (h, w, kh, kw) == (1, 1, 1, 1)
        and all(int(p) == 0 for p in padding)
        and groups == 1
    )


def _matvec(
    L: GraphLowering, x: TensorValue, weight: TensorValue, bias: TensorValue | None
) -> TensorValue:
    """``out[n, co] = sum_ci w[co, ci] * x[n, ci] (+ b[co])`` as a row reduction (the
    weight's rows are contiguous); a lazy ``x`` is stored first, not recomputed per row."""
    n, cout = x.sizes[0], weight.sizes[0]
    cin = x.sizes[1]
    xs = L.realize(x)
    dt = torch.float32
    zero = IConst(0)

    def term(idx: Sequence[IExpr]) -> VExpr:
        b, co, ci = idx
        w_v = weight.loader([co, ci, zero, zero])
        return VOp(Op.MUL, (w_v, xs.loader([b, ci, zero, zero])), dt)

    prod = TensorValue((n, cout, cin), dt, term)
    s = L.reduce(prod, [2], False, Op.SUM, dt)
    if bias is not None:
        b_tv = bias

        def out(idx: Sequence[IExpr]) -> VExpr:
            return VOp(Op.ADD, (s.loader(idx[:2]), b_tv.loader([idx[1]])), dt)

    else:

        def out(idx: Sequence[IExpr]) -> VExpr:
            return s.loader(idx[:2])

    return TensorValue((n, cout, 1, 1), dt, out)


@register(aten.convolution.default)
def _convolution(  # noqa: PLR0917
    L: GraphLowering,
    node: torch.fx.Node,
    x: TensorValue,
    weight: TensorValue,
    bias: TensorValue | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> object:
    if transposed or not _eligible(L, node, x, weight):
        return NotImplemented
    if _pointwise_on_one_pixel(x, weight, padding, groups):
        choice(f"convolution {node.name} w{tuple(weight.sizes)}", "kernel", "1x1 on a 1x1 image")
        return _matvec(L, x, weight, bias)
    plan = _plan(L, node, weight)
    kernel_size = tuple(int(s) for s in weight.sizes[2:])
    if plan.layout is Layout.NCHW:
        # eager's layout: NCHW input and weight, no per-call weight copy; the activations
        # are converted by the kernel that computes them (or one copy)
        log.debug("convolution %s kept NCHW (%s)", node.name, plan)
        contiguous = contiguous_strides(x.sizes)
        if x.ref is None or x.ref.strides != contiguous:
            x = L.realize(x, contiguous)
        if weight.ref is None or weight.ref.strides != contiguous_strides(weight.sizes):
            weight = L.realize(weight, contiguous_strides(weight.sizes))
        target, args = call_target(
            plan, x, weight, bias, stride, padding, dilation, groups, kernel_size
        )
        val = meta(node)
        assert isinstance(val, torch.Tensor)
        return L.fallback(node, target, args, {}, out_strides=[contiguous_strides(val.shape)])
    # the weight too: oneDNN reorders an NCHW weight on every call (10-20 us each for the
    # small CNN's convolutions), a kernel writing it channels-last costs a few
    x, weight = _channels_last(L, x), _channels_last(L, weight)
    target, args = call_target(
        plan, x, weight, bias, stride, padding, dilation, groups, kernel_size
    )
    return L.fallback(node, target, args, {}, out_strides=[_out_strides(node)])


if hasattr(torch.ops.mkldnn, "_convolution_pointwise"):

    @register(torch.ops.mkldnn._convolution_pointwise.default)
    def _convolution_pointwise(  # noqa: PLR0917
        L: GraphLowering,
        node: torch.fx.Node,
        x: TensorValue,
        weight: TensorValue,
        bias: TensorValue | None,
        padding: Sequence[int],
        stride: Sequence[int],
        dilation: Sequence[int],
        groups: int,
        attr: str,
        scalars: Sequence[object],
        algorithm: str | None,
    ) -> object:
        """A convolution with a folded epilogue (conv_fold.py): both operands channels-last."""
        if _eligible(L, node, x, weight):
            x, weight = _channels_last(L, x), _channels_last(L, weight)
            strides: list[tuple[int, ...]] | None = [_out_strides(node)]
        else:
            strides = None
        args = (x, weight, bias, padding, stride, dilation, groups, attr, scalars, algorithm)
        return L.fallback(node, node.target, args, {}, out_strides=strides)
