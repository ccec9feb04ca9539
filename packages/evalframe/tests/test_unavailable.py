"""The module imports on every CPython; where the hook is unsupported it says so."""

from __future__ import annotations

import sys

import pytest

import evalframe


def test_hook_availability_matches_the_interpreter_version():
    assert evalframe.HOOK_AVAILABLE == ((3, 11) <= sys.version_info[:2] <= (3, 13))


@pytest.mark.skipif(evalframe.HOOK_AVAILABLE, reason="the hook is available here")
def test_unavailable_hook_raises_a_clear_error_when_used():
    with pytest.raises(evalframe.HookUnavailableError, match="3.11, 3.12 and 3.13"):
        evalframe.set_callback(lambda frame, size: None)
    with pytest.raises(evalframe.HookUnavailableError), evalframe.run_only():
        pass


def test_unavailable_cache_api_still_answers():
    def f():
        return 1

    assert evalframe.cache_entries(f.__code__) == []
    evalframe.clear_cache(f.__code__)
    evalframe.clear_cache()


def test_the_reason_names_what_a_newer_python_needs():
    reason = evalframe._unavailable_reason((3, 14))
    assert "not 3.14" in reason and "frames.c" in reason and "EF_HOOK" in reason
    assert "predates" in evalframe._unavailable_reason((3, 10))
    if evalframe.HOOK_AVAILABLE:
        assert evalframe.UNAVAILABLE_REASON is None
