"""Fixtures for evalframe's tests; helpers live in evalframe_testkit.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests run with --import-mode=importlib: make the helper module importable.
sys.path.insert(0, str(Path(__file__).parent))

import evalframe
from evalframe import _evalframe

NEEDS_HOOK = pytest.mark.skipif(
    not evalframe.HOOK_AVAILABLE,
    reason="the frame-evaluation hook needs CPython 3.11, 3.12 or 3.13",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "unavailable" not in item.nodeid:
            item.add_marker(NEEDS_HOOK)


@pytest.fixture(autouse=True)
def _clean_hook_state() -> Iterator[None]:
    yield
    if evalframe.HOOK_AVAILABLE:
        assert _evalframe.get_callback() is None, "a test left a callback installed"
        _evalframe._set_force_slow_path(False)
    evalframe.clear_cache()


@pytest.fixture(params=[False, True], ids=["room-in-place", "no-room-path"])
def slow_path(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Run a test with the frame retargeted in place, and again through the path
    taken when the stack chunk has no room (3.12+: move to a new chunk; 3.11: call)."""
    _evalframe._set_force_slow_path(request.param)
    yield request.param
    _evalframe._set_force_slow_path(False)
