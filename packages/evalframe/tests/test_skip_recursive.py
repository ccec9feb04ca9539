"""SKIP_RECURSIVE: the code's frames and all they start run with the thread's hook off."""

from __future__ import annotations

import threading

import pytest
from evalframe_testkit import Recorder, entry_for, installed

import evalframe
from evalframe import _evalframe


def inner(x):
    return ("original", x)


def inner_fast(x):
    return ("entry", x)


def outer(x):
    return inner(x), _evalframe.get_callback(), _evalframe._stats()["active_threads"]


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recorder() -> Recorder:
    """Caches inner_fast for inner; marks outer and fib SKIP_RECURSIVE."""

    def skip_recursive(frame, size):
        return evalframe.SKIP_RECURSIVE

    return Recorder(
        {
            inner.__code__: entry_for(inner_fast.__code__),
            outer.__code__: skip_recursive,
            fib.__code__: skip_recursive,
        }
    )


def test_callees_run_untouched_and_the_callback_is_asked_once():
    rec = recorder()
    with installed(rec):
        assert inner(0) == ("entry", 0)  # inner's entry is cached
        first = outer(1)
        second = outer(2)
        assert inner(3) == ("entry", 3)  # hooked again after outer
        assert _evalframe.get_callback() is rec
    # Inside outer: the original inner, no callback, the hook uninstalled (one thread).
    assert first == (("original", 1), None, 0)
    assert second == (("original", 2), None, 0)
    assert rec.count("outer") == 1
    assert rec.count("inner") == 1
    assert _evalframe._is_skipped(outer.__code__) == 2


def test_recursive_code_gives_eager_results_and_is_asked_once():
    rec = recorder()
    with installed(rec):
        hooked = [fib(n) for n in range(15)]
    assert hooked == [0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377]
    assert rec.count("fib") == 1


def test_exception_from_the_frame_propagates_and_the_state_is_restored():
    def fails_after_inner(x):
        inner(x)
        raise LookupError(x)

    calls = []

    def callback(frame, size):
        calls.append(frame.f_code.co_name)
        return evalframe.SKIP_RECURSIVE if frame.f_code is fails_after_inner.__code__ else None

    with installed(callback):
        for _ in range(3):
            with pytest.raises(LookupError):
                fails_after_inner(5)
        assert _evalframe.get_callback() is callback
    assert calls.count("fails_after_inner") == 1
    assert "inner" not in calls
    assert _evalframe._stats()["active_threads"] == 0


def test_inside_run_only_the_callees_entries_are_off_and_run_only_comes_back():
    rec = recorder()
    with installed(rec):
        inner(0)
        outer(0)  # marks outer
    with evalframe.run_only():
        assert inner(1) == ("entry", 1)
        assert outer(2)[0] == ("original", 2)
        assert inner(3) == ("entry", 3)
    assert inner(4) == ("original", 4)


def test_a_callback_set_inside_the_frame_applies_there_and_is_dropped_after():
    inside = Recorder({inner.__code__: entry_for(inner_fast.__code__)})

    def sets_a_callback(x):
        evalframe.set_callback(inside)  # never restored by the frame itself
        return inner(x)

    def callback(frame, size):
        return evalframe.SKIP_RECURSIVE if frame.f_code is sets_a_callback.__code__ else None

    with installed(callback):
        assert sets_a_callback(1) == ("entry", 1)
        assert _evalframe.get_callback() is callback
    assert inside.count("inner") == 1


def test_another_threads_hook_keeps_working_meanwhile():
    rec_a, rec_b = recorder(), Recorder({inner.__code__: entry_for(inner_fast.__code__)})
    a_inside, b_done = threading.Event(), threading.Event()
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def waits(x):
        a_inside.set()
        assert b_done.wait(10)
        return inner(x), _evalframe._stats()["active_threads"]

    def callback_a(frame, size):
        if frame.f_code is waits.__code__:
            return evalframe.SKIP_RECURSIVE
        return rec_a(frame, size)

    def a_body():
        try:
            with installed(callback_a):
                results["a"] = waits("a")
                results["a-after"] = inner("a2")
        except BaseException as exc:  # reported below
            errors.append(exc)

    def b_body():
        try:
            assert a_inside.wait(10)
            with installed(rec_b):
                results["b"] = inner("b")
        except BaseException as exc:
            errors.append(exc)
        finally:
            b_done.set()

    threads = [threading.Thread(target=a_body), threading.Thread(target=b_body)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results["b"] == ("entry", "b")  # B hooked while A's frame ran unhooked
    assert results["a"][0] == ("original", "a")
    assert results["a-after"] == ("entry", "a2")
    assert _evalframe._stats()["active_threads"] == 0


def test_clear_cache_forgets_the_mark():
    rec = recorder()
    with installed(rec):
        outer(1)
        evalframe.clear_cache(outer.__code__)
        assert not _evalframe._is_skipped(outer.__code__)
        outer(2)
    assert rec.count("outer") == 2


def test_a_generator_function_marked_recursive_still_yields_its_values():
    def gen(n):
        for i in range(n):
            yield inner(i)

    def callback(frame, size):
        return evalframe.SKIP_RECURSIVE if frame.f_code is gen.__code__ else None

    with installed(callback):
        assert list(gen(3)) == [("original", 0), ("original", 1), ("original", 2)]
        assert list(gen(2)) == [("original", 0), ("original", 1)]
    assert _evalframe._is_skipped(gen.__code__) == 2


def test_skip_recursive_repr_and_type():
    assert repr(evalframe.SKIP_RECURSIVE) == "evalframe.SKIP_RECURSIVE"
    assert isinstance(evalframe.SKIP_RECURSIVE, evalframe.Skip)
    assert evalframe.SKIP_RECURSIVE is not evalframe.SKIP
