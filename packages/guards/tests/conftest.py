"""Shared fixtures: build a GuardSet, compile it, check and explain in one call.

Every test in this directory runs twice: on the C++ fast path (when the extension is built;
else that run is the Python path too) and with ``STRATA_GUARDS_PURE_PYTHON=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guards import CompiledGuards, GuardSet, compile_guards
from guards.native import PURE_PYTHON_ENV, native_module


@pytest.fixture(autouse=True, params=["native", "python"])
def check_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which check path compile_guards uses in this test: "native" or "python"."""
    if request.param == "python":
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    else:
        monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    return str(request.param)


@pytest.fixture
def native(check_path: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The built extension module (whatever the path); skips the test when it is not built."""
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    mod = native_module()
    if mod is None:
        pytest.skip("guards' C++ extension is not built")
    return mod


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
