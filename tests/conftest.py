from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

import compile_api


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    compile_api.reset()
    fields = compile_api.Config.__attrs_attrs__
    before = {a.name: getattr(compile_api.config, a.name) for a in fields}
    yield
    for name, value in before.items():
        setattr(compile_api.config, name, value)
    compile_api.reset()


# The torch whose torch.compile behaviour the "like torch" tests were written against: the GPU
# machine's torch 2.11 differs in places; there only eager is the reference.
TORCH_2_13 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)


class GraphCounter:
    """A backend that records the graphs it is given and runs them as they are."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    @property
    def count(self) -> int:
        return len(self.graphs)

    def op_count(self, index: int = -1) -> int:
        return sum(1 for n in self.graphs[index].graph.nodes if n.op.startswith("call_"))


@pytest.fixture
def counter() -> GraphCounter:
    return GraphCounter()
