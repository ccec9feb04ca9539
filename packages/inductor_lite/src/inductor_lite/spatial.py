"""Averages over H and W of channels-last activations (a CNN's pooling and its
squeeze-excitation blocks).

A convolution's output is channels-last (``convolutions.py``), and what follows it -- batch
norm and SiLU in an efficientnet -- is a lazy value reading it. Averaged over H and W as a
row reduction, that value is read one channel at a time with a stride of C floats, its
activation recomputed per element: a gather that does not vectorise (efficientnet_b0's first
squeeze-excitation pool, 32x112x112: a row per channel, 12544 strided loads each). Instead the
activation is stored once channels-last (the kernel writes it over the convolution's output,
in place) and averaged by a column-wise sum (column_sum.py; aten's ``mean`` on CUDA), which
vectorises across the channels; the block's broadcast multiply then reads the stored
activation instead of recomputing it. This is what torch's inductor does for these blocks too
(batch norm + SiLU in place, then the mean).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx

from .ir import BufferSpec
from .symbolic import Size, is_static
from .tensorvalue import TensorValue, buffers_read, index_vars

__all__ = ["channels_last_pool", "is_spatial_mean", "pool_layout"]

aten = torch.ops.aten

# Below this many elements a stored activation is averaged by our row kernel: its strided
# reads stay in cache, and an aten call costs a few microseconds of its own.
MIN_POOL_NUMEL = 8192


def _nhwc(sizes: Sequence[Size]) -> tuple[int, ...]:
    _, c, h, w = (int(s) for s in sizes)
    return (h * w * c, 1, w * c, c)


def is_spatial_mean(user: torch.fx.Node) -> bool:
    """``user`` averages or sums its 4-d input over H and W only."""
    if user.target not in (aten.mean.dim, aten.sum.dim_IntList) or len(user.args) < 2:
        return False
    dims = user.args[1]
    if not isinstance(dims, list | tuple):
        return False
    ints = [d for d in dims if isinstance(d, int)]
    return len(ints) == len(dims) and {d % 4 for d in ints} == {2, 3}


def pool_layout(
    node: torch.fx.Node, result: TensorValue, buffers: dict[str, BufferSpec]
) -> tuple[int, ...] | None:
    """Channels-last strides for storing ``result`` when a spatial mean reads it and it is
    computed from a channels-last buffer of its own sizes; else None (stay lazy)."""
    if result.ndim != 4 or result.dtype != torch.float32:
        return None
    if not all(is_static(s) for s in result.sizes) or int(result.numel) < MIN_POOL_NUMEL:
        return None
    if not any(is_spatial_mean(u) for u in node.users):
        return None
    want = _nhwc(result.sizes)
    value = result.loader(index_vars(4))
    for name in buffers_read(value):
        spec = buffers.get(name)
        if (
            spec is not None
            and tuple(spec.sizes) == tuple(result.sizes)
            and all(is_static(s) for s in spec.strides)
            and tuple(int(s) for s in spec.strides) == want
        ):
            return want
    return None


def channels_last_pool(x: TensorValue, dims: Sequence[int]) -> bool:
    """A stored channels-last 4-d float activation averaged over H and W (a column sum)."""
    ref = x.ref
    if ref is None or x.ndim != 4 or x.dtype != torch.float32:
        return False
    if {d % 4 for d in dims} != {2, 3} or not all(is_static(s) for s in x.sizes):
        return False
    if int(x.numel) < MIN_POOL_NUMEL or int(x.sizes[1]) < 8:
        return False
    want = _nhwc(x.sizes)
    return all(
        int(s) <= 1 or (is_static(a) and int(a) == b)
        for s, a, b in zip(x.sizes, ref.strides, want, strict=True)
    )
