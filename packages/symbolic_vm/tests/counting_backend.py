"""A compile_api backend for the tests that compile end to end: runs each graph as captured
and keeps it, so a test can count compiles and read the graphs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


class Counting:
    """A backend that runs each graph as captured and counts the compiles."""

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
