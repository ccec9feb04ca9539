"""Shared fixtures: build a GuardSet, compile it, check and explain in one call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guards import CompiledGuards, GuardSet, compile_guards


@pytest.fixture
def compile_set() -> Callable[..., CompiledGuards]:
    """compile_set(build, f_globals=None): build(gs) adds guards; returns CompiledGuards."""

    def make(
        build: Callable[[GuardSet], None], f_globals: dict[str, Any] | None = None
    ) -> CompiledGuards:
        gs = GuardSet()
        build(gs)
        return compile_guards(gs, f_globals if f_globals is not None else {})

    return make


def _verdict(cg: CompiledGuards, f_locals: dict[str, object]) -> tuple[bool, list[str]]:
    ok, why = cg(f_locals), cg.failures(f_locals)
    assert ok == (why == []), (ok, why)
    return ok, why


@pytest.fixture
def verdict() -> Callable[[CompiledGuards, dict[str, object]], tuple[bool, list[str]]]:
    """verdict(cg, f_locals) -> (check, failures); asserts the two views agree."""
    return _verdict
