"""sys.settrace, sys.setprofile and coverage keep working with the hook installed."""

from __future__ import annotations

import sys

import pytest
from evalframe_testkit import Recorder, entry_for, installed


def inner(x):
    y = x + 1
    return y


def outer(x):
    return inner(x) * 2


def outer_new(x):
    return inner(x) * 3


TRACED = {"inner", "outer", "outer_new"}


def trace_events(fn, *args):
    events = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name in TRACED:
            events.append((event, frame.f_code.co_name, frame.f_lineno))
        return tracer

    sys.settrace(tracer)
    try:
        result = fn(*args)
    finally:
        sys.settrace(None)
    return result, events


def profile_events(fn, *args):
    events = []

    def profiler(frame, event, arg):
        if frame.f_code.co_name in TRACED:
            events.append((event, frame.f_code.co_name))

    sys.setprofile(profiler)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, events


def test_settrace_sees_the_same_events_with_the_hook_installed():
    expected = trace_events(outer, 1)
    rec = Recorder({outer.__code__: lambda frame, size: None, inner.__code__: lambda f, s: None})
    with installed(rec):
        got = trace_events(outer, 1)
    assert got == expected
    assert rec.count("outer") == 1 and rec.count("inner") == 1


def test_settrace_sees_the_entry_code_run_in_place_of_the_frame(slow_path):
    _, new_events = trace_events(outer_new, 1)
    rec = Recorder({outer.__code__: entry_for(outer_new.__code__)})
    with installed(rec):
        result, events = trace_events(outer, 1)
    assert result == 6
    assert events == new_events
    assert ("call", "outer_new", outer_new.__code__.co_firstlineno) in events


def test_setprofile_sees_the_same_calls_with_the_hook_installed():
    expected = profile_events(outer, 1)
    rec = Recorder({outer.__code__: lambda frame, size: None})
    with installed(rec):
        got = profile_events(outer, 1)
    assert got == expected
    assert [e for e in got[1] if e[0] == "call"] == [("call", "outer"), ("call", "inner")]


def test_tracer_installed_while_hooked_frames_are_running():
    def body(x):
        sys.settrace(lambda frame, event, arg: None)
        try:
            return outer(x)
        finally:
            sys.settrace(None)

    rec = Recorder({outer.__code__: entry_for(outer_new.__code__)})
    with installed(rec):
        assert body(2) == 9


def test_coverage_measures_lines_run_under_the_hook(tmp_path):
    coverage = pytest.importorskip("coverage")
    cov = coverage.Coverage(data_file=str(tmp_path / "cov"), include=[__file__])
    rec = Recorder({outer.__code__: lambda frame, size: None})
    with installed(rec):
        cov.start()
        try:
            outer(1)
        finally:
            cov.stop()
    _, _, _, missing, _ = cov.analysis2(__file__)
    for fn in (inner, outer):
        body_line = fn.__code__.co_firstlineno + 1
        assert body_line not in missing
