"""Reductions as accurate as torch's inductor: training batch norm and layer norm, outputs and
gradients, each backend's error measured against a float64 run of the same function.

The bound is relative to torch's own error (a small multiple of it), not a fixed tolerance:
what is checked is that our statistics and gradient sums lose no more precision than torch's
compiled code does on the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from inductor_lite import compile_fx

# float32's unit roundoff: the floor of the bound when torch's error happens to be ~0
EPS32 = float(torch.finfo(torch.float32).eps)


def _bn_train(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    y = F.batch_norm(x, None, None, w, b, training=True)
    return (F.relu(y) * g).sum()


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return (F.layer_norm(x, (x.shape[-1],), w, b) * g).sum()


def _errors(fn: Callable[..., torch.Tensor], args: list[torch.Tensor]) -> list[float]:
    """Relative max error of the result and of each input's gradient against float64."""

    def run(f: Callable[..., torch.Tensor], xs: list[torch.Tensor]) -> list[torch.Tensor]:
        leaves = [a.detach().clone().requires_grad_(k < 3) for k, a in enumerate(xs)]
        out = f(*leaves)
        out.backward()
        return [out.detach(), *(t.grad for t in leaves[:3] if t.grad is not None)]

    ref = run(fn, [a.double() for a in args])
    got = run(fn, args)
    return [
        ((a.double() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
        for a, r in zip(got, ref, strict=True)
    ]


@pytest.mark.parametrize(
    ("name", "fn", "shape"),
    [
        # 16K values per channel: the statistics and weight/bias gradient sums are long rows
        ("batch_norm_training", _bn_train, (16, 8, 32, 32)),
        ("layer_norm", _layer_norm, (16, 8192)),
    ],
)
def test_reductions_are_as_accurate_as_torch_inductor(
    name: str, fn: Callable[..., torch.Tensor], shape: tuple[int, ...]
) -> None:
    torch.manual_seed(0)
    channels = shape[1] if len(shape) == 4 else shape[-1]
    pshape = (channels,)
    x = torch.randn(*shape) * 2 + 3  # a mean away from 0: the variance's hard case
    args = [x, torch.rand(pshape) + 0.5, torch.randn(pshape), torch.randn(*shape)]
    torch.compiler.reset()
    ours = _errors(torch.compile(fn, backend=compile_fx, dynamic=False), args)
    torch.compiler.reset()
    theirs = _errors(torch.compile(fn, backend="inductor", dynamic=False), args)
    torch.compiler.reset()
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a <= max(4 * b, 4 * EPS32), (name, k, ours, theirs)
