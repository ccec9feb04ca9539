"""Overhead probes: functions so small that their time is the per-call cost of the machinery."""

from __future__ import annotations

import torch

from .base import OVERHEAD, Instance, Tolerance, Workload, randn

CALLS = 20_000
QUICK_CALLS = 200


def add_one(x: torch.Tensor) -> torch.Tensor:
    """``x + 1``: one tiny kernel, so a call costs what guards and dispatch cost."""
    return x + 1


def ten_ops(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Ten ops on small tensors."""
    c = a + b
    d = c * a
    e = d - b
    f = torch.relu(e)
    g = torch.sin(f)
    h = g * 2.0
    i = h + a
    j = torch.exp(-i)
    k = j / (b.abs() + 1.0)
    return k.sum(dim=0)


def _build_add_one(device: torch.device, quick: bool) -> Instance:
    return Instance(add_one, (randn((3,), device, 50),))


def _build_ten_ops(device: torch.device, quick: bool) -> Instance:
    return Instance(ten_ops, (randn((8, 8), device, 51), randn((8, 8), device, 52)))


ADD_ONE = Workload(
    name="overhead_add_one",
    kind=OVERHEAD,
    description="x + 1 on a 3-element tensor, 20k calls per sample",
    build=_build_add_one,
    tolerance=Tolerance(rtol=1e-6, atol=1e-6),
    calls_per_sample=CALLS,
    quick_calls_per_sample=QUICK_CALLS,
)

TEN_OPS = Workload(
    name="overhead_10_ops",
    kind=OVERHEAD,
    description="10 ops on two 8x8 tensors, 20k calls per sample",
    build=_build_ten_ops,
    tolerance=Tolerance(rtol=1e-5, atol=1e-6),
    calls_per_sample=CALLS,
    quick_calls_per_sample=QUICK_CALLS,
)
