"""``module.parameters(recurse)`` and its siblings called with positional arguments trace as
eager runs them (PyTorch's test_modules::test_parameters1/2): ``parameters(False)`` was passed
to ``named_parameters`` as its ``prefix`` and failed inside torch while tracing."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch.nn.functional as F

import compile_api

from .conftest import GraphCounter


class GatedOnOwnParameters(torch.nn.Module):
    def __init__(self, method: str) -> None:
        super().__init__()
        self.method = method
        self.linear = torch.nn.Linear(6, 6)
        self.scale = torch.nn.Parameter(torch.randn(1, 6))
        self.register_buffer("shift", torch.ones(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        own = list(getattr(self, self.method)(False))  # recurse=False, by position
        every = list(getattr(self, self.method)(True))
        if any(p.requires_grad for p in own if isinstance(p, torch.Tensor)):
            return F.relu(self.linear(x)) * self.scale + len(own) + len(every)
        return x + 1 + len(own) + len(every)


@pytest.mark.parametrize("method", ["parameters", "buffers"])
def test_module_iterators_take_recurse_by_position_under_fullgraph(method: str) -> None:
    torch.manual_seed(0)
    model = GatedOnOwnParameters(method)
    x = torch.randn(3, 6)
    counter = GraphCounter()
    ours = compile_api.compile(model, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(ours, model(x))
    torch._dynamo.reset()
    theirs = torch._dynamo.testing.CompileCounter()
    torch.compile(model, backend=theirs, fullgraph=True)(x)
    assert counter.count == theirs.frame_count == 1
