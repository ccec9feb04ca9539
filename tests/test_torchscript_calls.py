"""Calls of TorchScript functions and modules inside compiled code.

A scripted (``torch.jit.script``) or traced function keeps the Python function it came from;
torch.compile traces that function instead of running the TorchScript one, so it lands in the
graph (transformers' deberta_v2 up to 5.17 scripts ``make_log_bucket_position``). A scripted
or traced module's forward is TorchScript only: torch.compile breaks on calling it, and so do
we (it runs eagerly, correctly). Each test compares with eager and with torch.compile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch._dynamo

import compile_api

from .conftest import GraphCounter


def _bucket(rel: torch.Tensor, size: int, limit: int) -> torch.Tensor:
    # A log-spaced relative-position bucketing in the style of deberta's, written for this test.
    half = size // 2
    sign = torch.sign(rel)
    mag = torch.abs(rel).clamp(min=1).float()
    scaled = torch.ceil(torch.log(mag / half) / torch.log(torch.tensor(limit / half)) * half)
    return torch.where(mag <= half, rel.float(), (scaled + half) * sign)


def _negative_ones(rel: torch.Tensor, size: int, limit: int) -> torch.Tensor:
    return rel.float() * 0 - 1


scripted_bucket = torch.jit.script(_bucket)


def _torch_graphs(fn: Callable[..., Any], *args: Any) -> tuple[Any, int]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        return torch.compile(fn, backend=backend)(*args), len(graphs)
    finally:
        torch._dynamo.reset()


def _rel(n: int) -> torch.Tensor:
    ids = torch.arange(n)
    return ids[:, None] - ids[None, :]


def relative_scores(x: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    return x @ scripted_bucket(rel, 4, 16).t()


def test_scripted_function_is_traced_through_its_python_function_in_one_graph(
    counter: GraphCounter,
) -> None:
    x, rel = torch.randn(3, 6), _rel(6)
    expected = relative_scores(x, rel)
    theirs, torch_count = _torch_graphs(relative_scores, x, rel)
    got = compile_api.compile(relative_scores, backend=counter, fullgraph=True)(x, rel)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(theirs, expected)
    assert counter.count == torch_count == 1
    # The bucketing's ops are in our graph, not one opaque call of the ScriptFunction.
    targets = {getattr(n.target, "__name__", str(n.target)) for n in counter.graphs[0].graph.nodes}
    assert {"sign", "ceil", "where"} <= targets


def test_traced_function_is_traced_through_its_python_function(counter: GraphCounter) -> None:
    def inner(a: torch.Tensor) -> torch.Tensor:
        return a.cos() * 2 + 1

    traced = torch.jit.trace(inner, torch.randn(4))

    def f(a: torch.Tensor) -> torch.Tensor:
        return traced(a).sum(0)

    x = torch.randn(4)
    expected = f(x)
    theirs, torch_count = _torch_graphs(f, x)
    got = compile_api.compile(f, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(theirs, expected)
    assert counter.count == torch_count == 1


def test_rebinding_the_scripted_global_recompiles(counter: GraphCounter) -> None:
    x, rel = torch.randn(3, 6), _rel(6)
    compiled = compile_api.compile(relative_scores, backend=counter)
    first = compiled(x, rel)
    global scripted_bucket
    saved = scripted_bucket
    scripted_bucket = torch.jit.script(_negative_ones)
    try:
        expected = relative_scores(x, rel)
        got = compiled(x, rel)
    finally:
        scripted_bucket = saved
    torch.testing.assert_close(got, expected)
    assert not torch.equal(got, first)
    assert counter.count == 2


class _Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2


class _Outer(torch.nn.Module):
    def __init__(self, sub: torch.nn.Module) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.sub = sub

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sub(self.lin(x)) + 1


@pytest.mark.parametrize("how", ["script", "trace"])
def test_torchscript_submodule_runs_eagerly_at_a_break_as_under_torch(
    how: str, counter: GraphCounter
) -> None:
    compile_api.config.suppress_errors = False  # an internal error must not hide as eager
    x = torch.randn(2, 4)
    sub = torch.jit.script(_Scale()) if how == "script" else torch.jit.trace(_Scale(), x)
    torch.manual_seed(0)
    model = _Outer(sub)
    expected = model(x)
    theirs, torch_count = _torch_graphs(model, x)
    explained = compile_api.explain(model)(x)
    got = compile_api.compile(model, backend=counter)(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(theirs, expected)
    assert explained.graph_break_count == 1
    assert "TorchScript" in str(explained.break_reasons[0])
    # The linear before the break and the add after it; torch gives 2 as well for a traced
    # submodule, and runs the whole forward eagerly (0 graphs) for a scripted one.
    assert counter.count == 2
    assert torch_count <= 2
