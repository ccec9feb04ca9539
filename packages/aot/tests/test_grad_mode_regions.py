"""A function may switch grad mode inside: ops run in the mode of their own region, as eager.

Compared with the function run eagerly on the same inputs: outputs, which of them require
grad, the grad mode the call leaves, and the gradients of a backward through them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import aot


def _enable_block(x: torch.Tensor, w: torch.Tensor, buf: torch.Tensor) -> Any:
    y = x * 3  # under the caller's no_grad: no gradient through y
    with torch.enable_grad():
        z = (y * w).sin()
        buf.add_(z.detach())  # a write that needs no grad
        row = z[1]  # a view made with grad on
    return z, y, row, z.sum() * 2


def _statement_on(x: torch.Tensor, w: torch.Tensor, buf: torch.Tensor) -> Any:
    y = x + buf
    torch.set_grad_enabled(True)  # and left on
    return (y * w).cos(), y


def _statement_off(x: torch.Tensor, w: torch.Tensor, buf: torch.Tensor) -> Any:
    y = x * w
    torch.set_grad_enabled(False)  # and left off
    return y, y * buf


def _run(
    fn: Callable[..., Any], entry: bool
) -> tuple[list[torch.Tensor], list[bool], bool, list[torch.Tensor | None], torch.Tensor]:
    x = torch.linspace(-1.0, 1.0, 6).reshape(2, 3).requires_grad_()
    w = torch.linspace(0.5, 1.5, 3).requires_grad_()
    buf = torch.ones(2, 3)
    try:
        torch.set_grad_enabled(entry)
        outs = list(fn(x, w, buf))
        after = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    needs = [o.requires_grad for o in outs]
    losses = [(o * (k + 1)).sum() for k, o in enumerate(outs) if o.requires_grad]
    if losses:
        torch.stack(losses).sum().backward()
    return [o.detach() for o in outs], needs, after, [x.grad, w.grad], buf


@pytest.mark.parametrize(
    ("fn", "entry"),
    [(_enable_block, False), (_statement_on, False), (_statement_off, True),
     (_enable_block, True), (_statement_off, False)],
)
@pytest.mark.parametrize("partition", [aot.default_partition, aot.min_cut_partition])
def test_grad_mode_switched_inside_the_function_is_followed_region_by_region(
    fn: Callable[..., Any], entry: bool, partition: aot.PartitionFn
) -> None:
    expected = _run(fn, entry)
    compiled = aot.aot_function(fn, aot.identity_compiler, partition_fn=partition)
    for call in range(2):
        got = _run(compiled, entry)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:3] == expected[1:3], (call, got[1:3], expected[1:3])
        torch.testing.assert_close(got[3], expected[3])
        torch.testing.assert_close(got[4], expected[4])
    art = compiled.artifacts
    assert art is not None
    assert (art.bw_gm is not None) == any(expected[1])
