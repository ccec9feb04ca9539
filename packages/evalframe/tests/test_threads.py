"""The callback is per thread; threads share code caches safely."""

from __future__ import annotations

import sys
import threading

from evalframe_testkit import Recorder, entry_for, installed, stats

import evalframe


def work(x):
    total = 0
    for i in range(x):
        total += i
    return total


def work_fast(x):
    return x * (x - 1) // 2 + 1_000_000


def run_in_threads(target, n):
    errors = []

    def wrapped(i):
        try:
            target(i)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, mid-call
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []


def test_two_threads_calling_the_same_hooked_function_both_get_correct_results():
    results: dict[int, list[int]] = {}

    def even(f_locals):
        return f_locals["x"] % 2 == 0

    def compile_even_only(frame, size):
        return evalframe.Entry(even, work_fast.__code__) if even(frame.f_locals) else None

    def body(i):
        rec = Recorder({work.__code__: compile_even_only})
        with installed(rec):
            results[i] = [work(x) for x in range(200)]

    run_in_threads(body, 2)
    expected = [work_fast(x) if x % 2 == 0 else work(x) for x in range(200)]
    assert results == {0: expected, 1: expected}


def test_callback_of_one_thread_does_not_hook_another():
    rec = Recorder({work.__code__: entry_for(work_fast.__code__)})
    seen_in_thread = []

    def other(_i):
        seen_in_thread.append(work(10))

    with installed(rec):
        assert work(10) == work_fast(10)  # cached by this thread's callback
        run_in_threads(other, 1)
    assert seen_in_thread == [45]  # the other thread has no callback: the original ran
    assert evalframe.set_callback(None) is None


def test_thread_that_exits_with_a_callback_releases_it():
    before = stats()["active_threads"]

    def body(_i):
        evalframe.set_callback(lambda frame, size: None)
        assert stats()["active_threads"] == before + 1

    run_in_threads(body, 1)
    assert stats()["active_threads"] == before
