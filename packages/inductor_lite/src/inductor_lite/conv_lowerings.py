"""Convolutions in channels-last layout on CPU.

A 2-d convolution stays an aten call (oneDNN), but oneDNN's NCHW path reorders its input to
its blocked layout and back on every call, while a channels-last (NHWC) input is used as is:
on one core the three convolutions of a small CNN took 2.6 ms in NCHW and 1.1 ms in NHWC
(8x3x64x64 input). So the convolution's input is stored channels-last. When the input is a
computed value (batch norm + ReLU of the previous convolution) that costs nothing extra: the
kernel that computes it writes it in NHWC order. A stored NCHW input is copied once
(cheap against the saving: 0.04 ms for the 8x3x64x64 image). oneDNN then returns a
channels-last result, which the kernels after it read through its strides; a graph output
keeps eager's layout (the output rule copies it back when it is returned).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
import torch.fx

from .ir import contiguous_strides
from .lowering import GraphLowering
from .lowerings import aten, meta, register
from .symbolic import is_static
from .tensorvalue import TensorValue

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
    val = meta(node)
    if (
        not L.config.conv_channels_last
        or not all(is_static(s) for s in (*x.sizes, *weight.sizes))
        or transposed
        or x.ndim != 4
        or weight.ndim != 4
        or not isinstance(val, torch.Tensor)
        or val.device.type != "cpu"
        or x.dtype != torch.float32
        or weight.dtype != torch.float32
        or not torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
    ):
        return NotImplemented
    if not _is_channels_last(x):
        x = L.realize(x, channels_last_strides(x.sizes))
    if not all(is_static(s) for s in val.shape) or not all(is_static(s) for s in val.stride()):
        return NotImplemented
    out_sizes = tuple(int(s) for s in val.shape)
    # oneDNN answers a channels-last input with a channels-last result (checked on every
    # call by the wrapper's restride, which copies if it ever did not)
    strides = channels_last_strides(out_sizes)
    if strides == contiguous_strides(out_sizes):
        strides = tuple(int(s) for s in val.stride())
    log.debug("channels-last convolution %s -> %s", x.sizes, out_sizes)
    args = (x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    return L.fallback(node, node.target, args, {}, out_strides=[strides])
