"""Shared by the test_feat_* files: compile through compile_api with a graph-counting backend.

The VM's own harness (vm_harness.check) proves a capture against eager; these helpers run the
whole stack (hook, guards, cache) so a test can show that a changed value recompiles.
No tests here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

try:
    import compile_api
except ImportError as exc:  # evalframe's C extension not built for this interpreter
    compile_api = None
    _WHY = f"compile_api cannot be imported: {exc}"


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


def fresh_counter() -> GraphCounter:
    """A fresh counting backend, with compile_api's caches cleared (skips the test when
    compile_api cannot be imported)."""
    if compile_api is None:
        pytest.skip(_WHY)
    compile_api.reset()
    return GraphCounter()


def compiled(fn: Callable[..., Any], backend: GraphCounter, *, fullgraph: bool = True) -> Any:
    """``compile_api.compile(fn, backend=backend, fullgraph=fullgraph)``."""
    return compile_api.compile(fn, backend=backend, fullgraph=fullgraph)
