"""Memory-bound workloads: a chain of pointwise ops, and layer_norm followed by softmax."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import INFERENCE, Instance, Tolerance, Workload, randn


def pointwise_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Twelve pointwise ops: eager runs twelve kernels, a fusing compiler can run one."""
    a = x * 1.5 + y
    b = torch.sin(a) * torch.cos(y)
    c = torch.relu(b - 0.1)
    d = torch.sigmoid(c + x)
    return d * y - a * 0.5


def _build_pointwise(device: torch.device, quick: bool) -> Instance:
    shape = (64, 32) if quick else (4096, 1024)
    return Instance(pointwise_chain, (randn(shape, device, 1), randn(shape, device, 2)))


def layer_norm_softmax(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """layer_norm over the last dimension, then softmax over it: two row reductions."""
    h = F.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)
    return torch.softmax(h, dim=-1)


def _build_layer_norm_softmax(device: torch.device, quick: bool) -> Instance:
    rows, cols = (64, 32) if quick else (4096, 1024)
    x = randn((rows, cols), device, 3)
    weight = 1.0 + 0.1 * randn((cols,), device, 4)
    bias = 0.1 * randn((cols,), device, 5)
    return Instance(layer_norm_softmax, (x, weight, bias))


POINTWISE = Workload(
    name="pointwise",
    kind=INFERENCE,
    description="12 pointwise ops on two 4096x1024 float32 tensors",
    build=_build_pointwise,
    tolerance=Tolerance(rtol=1e-5, atol=1e-5),
)

LAYER_NORM_SOFTMAX = Workload(
    name="layernorm_softmax",
    kind=INFERENCE,
    description="layer_norm then softmax over rows of a 4096x1024 float32 tensor",
    build=_build_layer_norm_softmax,
    # Softmax outputs are ~1/1024: a larger atol would accept anything, so rtol carries the check.
    tolerance=Tolerance(rtol=1e-4, atol=1e-7),
)
