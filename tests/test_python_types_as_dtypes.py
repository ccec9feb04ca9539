"""Python's int/float/bool passed where torch takes a dtype, inside a compiled frame.

torch's argument parser maps them to int64/float64/bool; transformers' caches write
``torch.tensor([-1], dtype=int)`` (the sliding-window StaticCache), which broke the frame
("type object int cannot be passed to a torch operation"): Mistral's generate() with a
StaticCache made 15 graphs and 21 breaks where torch.compile makes 2 and none.
"""

from __future__ import annotations

from typing import Any

import torch
import torch._dynamo

import compile_api


def python_types(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    index = torch.tensor([-1], dtype=int)
    y = x.clone()
    y[index] = 0.0
    return (
        y,
        x.to(float) * 2,
        torch.zeros(3, dtype=bool) | (x[:3] > 0),
        torch.full((2,), 3, dtype=int),
    )


def test_python_types_as_dtypes_compile_in_one_graph_with_eager_results() -> None:
    graphs: list[Any] = []
    compiled = compile_api.compile(
        python_types, backend=lambda gm, ex: (graphs.append(gm), gm)[1], fullgraph=True
    )
    torch._dynamo.reset()
    theirs: list[Any] = []
    reference = torch.compile(
        python_types, backend=lambda gm, ex: (theirs.append(gm), gm)[1], fullgraph=True
    )
    for x in (torch.randn(5), torch.randn(5)):
        want = python_types(x)
        for got in (compiled(x), reference(x)):
            assert [t.dtype for t in got] == [t.dtype for t in want]
            torch.testing.assert_close(got, want)
    torch._dynamo.reset()
    assert len(graphs) == len(theirs) == 1
