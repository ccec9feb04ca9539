from __future__ import annotations

from collections.abc import Iterator

import pytest

import compile_api


@pytest.fixture(autouse=True)
def fresh_config() -> Iterator[None]:
    """Every test ends with empty caches and the config it started with."""
    saved = {
        a.name: getattr(compile_api.config, a.name) for a in compile_api.Config.__attrs_attrs__
    }
    yield
    for name, value in saved.items():
        setattr(compile_api.config, name, value)
    compile_api.reset()
