"""Builds torch.fx GraphModules with fake-tensor example values."""

from fxbuild.builder import GraphBuilder, SubgraphBuilder, is_fake
from fxbuild.errors import FakePropagationError, FxBuildError

__all__: list[str] = [
    "GraphBuilder",
    "SubgraphBuilder",
    "FakePropagationError",
    "FxBuildError",
    "is_fake",
]
