"""function_effects.python_effect: which custom autograd.Functions may become one graph node."""

from __future__ import annotations

import math
from typing import Any

import torch

from symbolic_vm.function_effects import python_effect

SEEN: list[str] = []
COUNT = 0
SCALE = 2.0


def _helper(g: torch.Tensor) -> torch.Tensor:
    return g * SCALE * math.pi


class Pure(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return _helper(g) * torch.cos(x) + len(ctx.needs_input_grad)


class AppendsInForward(Pure):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        SEEN.append("f")
        return x * 2


class CountsInBackward(Pure):
    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        global COUNT
        COUNT += 1
        return g


def _logs(g: torch.Tensor) -> torch.Tensor:
    print(g.shape)
    return g


class PrintsThroughAHelper(Pure):
    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return _logs(g)


def _closure_rebinder() -> type:
    calls = 0

    class Rebinds(Pure):
        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            nonlocal calls
            calls += 1
            return g

    return Rebinds


def test_a_function_of_tensor_work_and_pure_helpers_has_no_effect() -> None:
    assert python_effect(Pure) is None


def test_effects_are_found_with_where_they_are() -> None:
    found = python_effect(AppendsInForward)
    assert found is not None and "SEEN" in found and "AppendsInForward.forward" in found
    found = python_effect(CountsInBackward)
    assert found is not None and "global 'COUNT'" in found
    found = python_effect(PrintsThroughAHelper)
    assert found is not None and "print" in found and __file__ in found
    found = python_effect(_closure_rebinder())
    assert found is not None and "closure variable 'calls'" in found
