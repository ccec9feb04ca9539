"""The callback: when it runs, what it sees, and how its answers are honoured."""

from __future__ import annotations

import traceback
import types

import pytest
from evalframe_testkit import Recorder, always, entry_for, installed

import evalframe
from evalframe import _evalframe


def add(x, y=10):
    return x + y


def add_twice(x, y=10):
    return 2 * (x + y)


def test_callback_sees_fresh_frame_with_arguments_code_and_globals():
    seen = []

    def cb(frame, size):
        if frame.f_code is add.__code__:
            seen.append(
                (
                    dict(frame.f_locals),
                    frame.f_globals is globals(),
                    frame.f_builtins["len"] is len,
                    frame.f_back.f_code.co_name,
                    frame.f_lineno,
                    size,
                )
            )
        return None

    with installed(cb):
        assert add(1, y=2) == 3
    assert seen == [
        (
            {"x": 1, "y": 2},
            True,
            True,
            "test_callback_sees_fresh_frame_with_arguments_code_and_globals",
            add.__code__.co_firstlineno,
            0,
        )
    ]


def test_none_runs_the_original_and_asks_again_next_time():
    rec = Recorder({add.__code__: lambda frame, size: None})
    with installed(rec):
        assert [add(i) for i in range(3)] == [10, 11, 12]
    assert rec.count("add") == 3
    assert evalframe.cache_entries(add.__code__) == []


def test_skip_runs_the_original_and_never_asks_again_for_that_code():
    rec = Recorder({add.__code__: lambda frame, size: evalframe.SKIP})
    with installed(rec):
        assert [add(i) for i in range(3)] == [10, 11, 12]
    assert rec.count("add") == 1
    assert _evalframe._is_skipped(add.__code__)
    evalframe.clear_cache(add.__code__)
    assert not _evalframe._is_skipped(add.__code__)


def test_entry_is_cached_and_run_and_later_calls_hit_it():
    rec = Recorder({add.__code__: entry_for(add_twice.__code__)})
    with installed(rec):
        assert [add(i) for i in range(3)] == [add_twice(i) for i in range(3)]
    assert rec.count("add") == 1
    [entry] = evalframe.cache_entries(add.__code__)
    assert entry.code is add_twice.__code__ and entry.guard is always


def test_cache_size_counts_entries_already_cached():
    sizes = []

    def cb(frame, size):
        if frame.f_code is add.__code__:
            sizes.append(size)
            return evalframe.Entry(lambda f_locals, n=size: f_locals["x"] == n, add.__code__)
        return None

    with installed(cb):
        for x in [0, 1, 2, 0, 1, 2, 3]:
            assert add(x) == x + 10
    assert sizes == [0, 1, 2, 3]
    assert len(evalframe.cache_entries(add.__code__)) == 4


def test_callback_frames_run_with_the_hook_disabled():
    names = []

    def helper(code):
        return code.co_name

    def cb(frame, size):
        names.append(helper(frame.f_code))
        return None

    with installed(cb):
        add(1)
    assert "helper" not in names and "add" in names


def test_set_callback_returns_the_previous_callback():
    def first(frame, size):
        return None

    def second(frame, size):
        return None

    assert evalframe.set_callback(first) is None
    assert evalframe.set_callback(second) is first
    assert evalframe.set_callback(None) is second
    assert evalframe.set_callback(None) is None


def test_callback_exception_reaches_the_caller_and_names_the_users_function():
    def cb(frame, size):
        if frame.f_code is add.__code__:
            raise LookupError("from the callback")
        return None

    with installed(cb):
        with pytest.raises(LookupError, match="from the callback") as info:
            add(1)
        names = [fs.name for fs in traceback.extract_tb(info.value.__traceback__)]
        assert names[-2:] == ["add", "cb"]
        # The interpreter is consistent afterwards: other frames still run, and
        # the failing code is asked again (no entry was cached).
        assert add_twice(1) == 22
        with pytest.raises(LookupError):
            add(1)
    assert add(1) == 11


def test_guard_exception_reaches_the_caller_and_names_the_users_function():
    def bad_guard(f_locals):
        if f_locals["x"] < 0:
            raise ArithmeticError("from the guard")
        return True

    rec = Recorder({add.__code__: entry_for(add_twice.__code__, bad_guard)})
    with installed(rec):
        assert add(1) == 22
        with pytest.raises(ArithmeticError, match="from the guard") as info:
            add(-1)
        names = [fs.name for fs in traceback.extract_tb(info.value.__traceback__)]
        assert names[-2:] == ["add", "bad_guard"]
        assert add(2) == 24
    assert add(-1) == 9


def test_guard_frames_run_with_the_hook_disabled():
    def guard_helper(x):
        return x is not None

    rec = Recorder(
        {
            add.__code__: entry_for(add_twice.__code__, lambda f: guard_helper(f["x"])),
            guard_helper.__code__: lambda frame, size: pytest.fail("guard frame was hooked"),
        }
    )
    with installed(rec):
        assert add(1) == 22
        assert add(2) == 24


def test_nonboolean_guard_results_are_judged_by_truth():
    entries = iter([evalframe.Entry(lambda f: [], add_twice.__code__)])
    rec = Recorder({add.__code__: lambda frame, size: next(entries, None)})
    with installed(rec):
        assert add(1) == 22  # the entry from the callback runs
        assert add(1) == 11  # [] is false: a miss, the callback answers None
    assert rec.count("add") == 2


def test_callback_can_change_callbacks_while_running():
    calls = []

    def replacement(frame, size):
        if frame.f_code is add.__code__:
            calls.append("replacement")
        return None

    def first(frame, size):
        if frame.f_code is add.__code__:
            calls.append("first")
            evalframe.set_callback(replacement)
        return None

    with installed(first):
        add(1)
        add(2)
        assert evalframe.set_callback(first) is replacement
    assert calls == ["first", "replacement"]


def test_guard_that_clears_the_cache_while_entries_are_tried_is_safe():
    def clearing_guard(f_locals):
        evalframe.clear_cache(add.__code__)
        return False

    answers = iter(
        [
            evalframe.Entry(lambda f_locals: f_locals["x"] > 0, add_twice.__code__),
            evalframe.Entry(clearing_guard, add_twice.__code__),
        ]
    )
    sizes = []

    def cb(frame, size):
        if frame.f_code is add.__code__:
            sizes.append(size)
            return next(answers, None)
        return None

    with installed(cb):
        assert add(1) == 22  # miss: caches the x > 0 entry
        assert add(-1) == 18  # miss: caches the clearing entry (newest)
        # The clearing guard runs first, empties the cache and refuses; the older
        # entry is gone, so this is a miss and the callback answers None.
        assert add(5) == 15
    assert sizes == [0, 1, 0]
    assert evalframe.cache_entries(add.__code__) == []


def test_callback_error_placed_in_the_frame_shows_only_the_users_frames():
    """An error whose traceback holds an entry for the frame the callback was handed starts
    there: the callback's frames and the entry at the function's def line are dropped."""

    def cb(frame, size):
        if frame.f_code is add.__code__:
            err = LookupError("placed")
            line = frame.f_code.co_firstlineno + 1
            raise err.with_traceback(types.TracebackType(None, frame, -1, line))
        return None

    with installed(cb):
        with pytest.raises(LookupError, match="placed") as info:
            add(1)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [(f.name, f.lineno) for f in frames] == [
        ("test_callback_error_placed_in_the_frame_shows_only_the_users_frames", frames[0].lineno),
        ("add", add.__code__.co_firstlineno + 1),
    ]
    assert add(1) == 11
