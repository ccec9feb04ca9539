"""Mistakes give a clear TypeError or ValueError where they are made, never a crash."""

from __future__ import annotations

import pytest
from evalframe_testkit import Recorder, always, entry_for, installed

import evalframe


def f(a, b=1, *args, c, **kwargs):
    return a


def same_layout(a, b=1, *args, c, **kwargs):
    return "same"


def fewer_args(a, *args, c, **kwargs):
    return "fewer"


def renamed(a, bb=1, *args, c, **kwargs):
    return "renamed"


def no_varargs(a, b=1, *, c, **kwargs):
    return "no *args"


def more_kwonly(a, b=1, *args, c, d=0, **kwargs):
    return "more kw-only"


def make_closure():
    z = 1

    def with_free(a, b=1, *args, c, **kwargs):
        return z

    return with_free


def test_set_callback_rejects_a_non_callable():
    with pytest.raises(TypeError, match="callable or None, not int"):
        evalframe.set_callback(42)  # type: ignore[arg-type]
    assert evalframe.set_callback(None) is None


def test_entry_rejects_a_non_callable_guard():
    with pytest.raises(TypeError, match="guard must be callable, not str"):
        evalframe.Entry("x > 0", f.__code__)  # type: ignore[arg-type]


def test_entry_rejects_a_code_that_is_not_a_code_object():
    with pytest.raises(TypeError, match="code must be a code object, not function"):
        evalframe.Entry(always, f)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("other", "what"),
    [
        (fewer_args, "argument counts"),
        (renamed, "argument names"),
        (no_varargs, "flags"),
        (more_kwonly, "argument counts"),
        (make_closure(), "free variables"),
    ],
)
def test_entry_with_another_argument_layout_is_a_value_error_at_the_call(other, what):
    rec = Recorder({f.__code__: entry_for(other.__code__)})
    with installed(rec):
        with pytest.raises(ValueError, match=what):
            f(1, c=2)
        assert f.__code__ not in [e.code for e in evalframe.cache_entries(f.__code__)]
        assert evalframe.cache_entries(f.__code__) == []
    assert f(1, c=2) == 1


def test_entry_with_the_same_layout_is_accepted():
    rec = Recorder({f.__code__: entry_for(same_layout.__code__)})
    with installed(rec):
        assert f(1, c=2) == "same"


def test_callback_returning_something_else_is_a_type_error_at_the_call():
    rec = Recorder({f.__code__: lambda frame, size: "compile me"})
    with installed(rec):
        with pytest.raises(TypeError, match="None, SKIP or an Entry, not str"):
            f(1, c=2)
    assert f(1, c=2) == 1


def test_cache_functions_reject_non_code_objects():
    with pytest.raises(TypeError, match="code object"):
        evalframe.cache_entries(f)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="code object"):
        evalframe.clear_cache(f)  # type: ignore[arg-type]
