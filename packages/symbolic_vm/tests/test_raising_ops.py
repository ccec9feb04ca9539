"""Which graph ops count as able to raise on tensor data (symbolic_vm.raising_ops): a user
manager's block holding one runs as Python, so its ``__exit__`` sees the error as in eager
(the differential tests are in tests/test_graph_breaks_in_managers_and_iterators.py)."""

from __future__ import annotations

import operator
from collections.abc import Callable

import pytest
import torch

from symbolic_vm.raising_ops import may_raise_on_data


def _graph() -> tuple[torch.fx.Graph, dict[str, torch.fx.Node]]:
    graph = torch.fx.Graph()
    inputs = {}
    for name, example in (
        ("x", torch.randn(4)), ("i", torch.tensor([1])), ("m", torch.tensor([True])),
    ):
        node = graph.placeholder(name)
        node.meta["example_value"] = example
        inputs[name] = node
    return graph, inputs


Build = Callable[[torch.fx.Graph, dict[str, torch.fx.Node]], torch.fx.Node]

RAISING: dict[str, Build] = {
    "index_select": lambda g, n: g.call_function(torch.index_select, (n["x"], 0, n["i"])),
    "subscript_by_int_tensor": lambda g, n: g.call_function(operator.getitem, (n["x"], n["i"])),
    "gather_method": lambda g, n: g.call_method("gather", (n["x"], 0, n["i"])),
    "embedding": lambda g, n: g.call_function(
        torch.nn.functional.embedding, (n["i"], n["x"])
    ),
    "torch_check": lambda g, n: g.call_function(torch._check, (True,)),
    "cross_entropy": lambda g, n: g.call_function(
        torch.nn.functional.cross_entropy, (n["x"], n["i"])
    ),
}
SAFE: dict[str, Build] = {
    "sin": lambda g, n: g.call_function(torch.sin, (n["x"],)),
    "matmul": lambda g, n: g.call_function(torch.matmul, (n["x"], n["x"])),
    "subscript_by_mask": lambda g, n: g.call_function(operator.getitem, (n["x"], n["m"])),
    "subscript_by_slice": lambda g, n: g.call_function(operator.getitem, (n["x"], slice(0, 2))),
    "checkpoint": lambda g, n: g.call_function(torch.utils.checkpoint.checkpoint, (n["x"],)),
    "sum_method": lambda g, n: g.call_method("sum", (n["x"],)),
}


@pytest.mark.parametrize("name", sorted(RAISING))
def test_ops_that_read_indices_or_check_values_may_raise_on_data(name: str) -> None:
    graph, inputs = _graph()
    assert may_raise_on_data([RAISING[name](graph, inputs)])


@pytest.mark.parametrize("name", sorted(SAFE))
def test_ops_that_fail_only_on_metadata_do_not(name: str) -> None:
    graph, inputs = _graph()
    assert not may_raise_on_data([SAFE[name](graph, inputs)])
    assert not may_raise_on_data(list(graph.nodes))  # placeholders never raise
