"""A compiled graph that must run as it came says so once, on the perf_hints channel."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch


def _hints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "strata.perf_hints"]


def test_grad_needed_runs_eagerly_right_and_is_said_once(
    check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a * 2).sum(-1)

    x = torch.randn(4, 8)
    graph = check(f, [x])
    w = torch.randn(4, 8, requires_grad=True)
    with caplog.at_level(logging.DEBUG, logger="strata.perf_hints"):
        for _ in range(2):
            out = graph(w)
            torch.testing.assert_close(out, f(w))
    assert graph.eager_calls == 2
    (msg,) = _hints(caplog)
    assert "runs eagerly" in msg and "requires grad" in msg
    out.sum().backward()  # the eager route kept autograd: gradients flow as eagerly
    assert w.grad is not None
    torch.testing.assert_close(w.grad, 2 * (1 - torch.tanh(2 * w.detach()) ** 2))


def test_another_dtype_names_the_input_and_both_layouts(
    check: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b + 1

    graph = check(f, [torch.randn(3, 5), torch.randn(3, 5)])
    a, b = torch.randn(3, 5), torch.randn(3, 5, dtype=torch.float64)
    with caplog.at_level(logging.DEBUG, logger="strata.perf_hints"), torch.no_grad():
        torch.testing.assert_close(graph(a, b), f(a, b))
    (msg,) = _hints(caplog)
    assert "input 1 is a torch.float64 tensor" in msg and "torch.float32" in msg
