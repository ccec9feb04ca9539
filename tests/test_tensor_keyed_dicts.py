"""``d[t]`` of a dict from the frame keyed by tensors (an optimizer's state, a cache keyed by
parameters): read in the graph as torch.compile reads it, the key found by identity.

Before: ``expected a Python constant, got a tensor``, a graph break at the read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch._dynamo

import compile_api

from .conftest import TORCH_2_13, GraphCounter


@pytest.fixture(autouse=True)
def torch_fresh() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def read(d: dict[object, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    return d[x] + 3


def test_a_tensor_keyed_read_is_one_graph_like_torch_and_follows_the_key() -> None:
    x, other = torch.randn(10), torch.randn(10)
    d: dict[object, torch.Tensor] = {x: torch.randn(10), 3: torch.randn(10), other: torch.ones(10)}
    counts = []
    for compile_fn in (
        (compile_api.compile, torch.compile) if TORCH_2_13 else (compile_api.compile,)
    ):
        counter = GraphCounter()
        compiled = compile_fn(read, backend=counter)
        torch.testing.assert_close(compiled(d, x), read(d, x))
        torch.testing.assert_close(compiled(d, x), read(d, x))
        counts.append(counter.count)
        # another key of the same shape: its own value (a recompile), never x's
        torch.testing.assert_close(compiled(d, other), read(d, other))
        d[x] = torch.zeros(10)  # the value is read at call time
        torch.testing.assert_close(compiled(d, x), read(d, x))
    assert counts[0] == 1
    assert all(c == counts[0] for c in counts)
