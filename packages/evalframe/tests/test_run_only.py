"""run_only(): cached entries still run, misses run the original, no callback."""

from __future__ import annotations

from evalframe_testkit import Recorder, entry_for, installed

import evalframe


def square(x):
    return x * x


def square_plus_one(x):
    return x * x + 1


def test_run_only_runs_cached_entries_and_originals_without_calling_back():
    rec = Recorder({square.__code__: entry_for(square_plus_one.__code__, lambda f: f["x"] > 0)})
    with installed(rec):
        assert square(2) == 5  # the callback caches the entry
        with evalframe.run_only():
            assert square(3) == 10  # hit
            assert square(-3) == 9  # miss: the original, no callback
        assert rec.count("square") == 1
        assert square(-3) == 10  # outside run_only the callback is asked again
    assert rec.count("square") == 2


def test_run_only_works_with_no_callback_installed_and_nests():
    rec = Recorder({square.__code__: entry_for(square_plus_one.__code__)})
    with installed(rec):
        square(1)
    with evalframe.run_only():
        with evalframe.run_only():
            assert square(4) == 17
        assert square(4) == 17
    assert square(4) == 16
