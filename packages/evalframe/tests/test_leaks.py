"""Cache entries die with their code objects; hot paths leak nothing."""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
import weakref

import pytest
from evalframe_testkit import Recorder, always, installed

import evalframe


class Guard:
    """A guard whose lifetime a weakref can watch."""

    def __call__(self, f_locals):
        return True


def run_itself_behind(guard):
    """An answer: cache the frame's own code behind `guard`."""
    return lambda frame, size: evalframe.Entry(guard, frame.f_code)


def test_cache_entries_are_freed_when_their_code_object_dies():
    namespace: dict[str, object] = {}
    exec("def short_lived(x):\n    return x\n", namespace)
    fn = namespace.pop("short_lived")
    guard = Guard()
    watch = weakref.ref(guard)
    code = fn.__code__
    rec = Recorder({code: run_itself_behind(guard)})
    with installed(rec):
        assert fn(1) == 1
        assert fn(2) == 2
    assert len(evalframe.cache_entries(code)) == 1
    del guard, fn, code, rec
    gc.collect()
    assert watch() is None


def test_clear_cache_drops_every_entry():
    def f(x):
        return x

    def g(x):
        return x

    rec = Recorder(
        {
            f.__code__: lambda frame, size: evalframe.Entry(always, frame.f_code),
            g.__code__: lambda frame, size: evalframe.Entry(always, frame.f_code),
        }
    )
    with installed(rec):
        f(1), g(1)
    assert evalframe.cache_entries(f.__code__) and evalframe.cache_entries(g.__code__)
    evalframe.clear_cache()
    assert evalframe.cache_entries(f.__code__) == [] == evalframe.cache_entries(g.__code__)


def _compile_and_call_lambdas(count, start):
    for i in range(start, start + count):
        fn = eval(compile(f"lambda x: x + {i}", "<short-lived>", "eval"))
        assert fn(1) == 1 + i  # miss: the callback caches an entry for it
        assert fn(2) == 2 + i  # hit


def _resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_compiling_100k_short_lived_lambdas_keeps_memory_flat():
    def cb(frame, size):
        if frame.f_code.co_filename == "<short-lived>":
            return evalframe.Entry(always, frame.f_code)
        return None

    with installed(cb):
        _compile_and_call_lambdas(10_000, 0)  # warm up free lists, arenas and caches
        gc.collect()
        baseline = _resident_bytes()
        _compile_and_call_lambdas(100_000, 10_000)
        gc.collect()
        grown = _resident_bytes() - baseline
    # A leaked code object with its cache is ~1 KiB: 100k of them would be ~100 MiB.
    assert grown < 8 * 1024 * 1024, f"resident memory grew by {grown} bytes"


def test_short_lived_code_objects_leave_nothing_traced_behind():
    def cb(frame, size):
        if frame.f_code.co_filename == "<short-lived>":
            return evalframe.Entry(always, frame.f_code)
        return None

    with installed(cb):
        _compile_and_call_lambdas(2_000, 0)
        gc.collect()
        tracemalloc.start()
        try:
            baseline = _traced_here()
            _compile_and_call_lambdas(5_000, 2_000)
            gc.collect()
            grown = _traced_here() - baseline
        finally:
            tracemalloc.stop()
    assert grown < 64 * 1024, f"traced memory grew by {grown} bytes"


# Only what this test's frames allocate (the hook's C code runs inside them: compiling and
# calling the lambdas, the callback): other threads a long-lived test process has started
# (pytest-xdist's reporting, earlier tests' worker pools) allocate meanwhile, and are not the hook.
_THIS_TEST = [
    tracemalloc.Filter(True, pattern) for pattern in (__file__, "<short-lived>", "*evalframe*")
]


def _traced_here() -> int:
    snapshot = tracemalloc.take_snapshot().filter_traces(_THIS_TEST)
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_hits_and_misses_leak_no_references():
    def f(a, *args, k=0, **kwargs):
        return a

    def g(a, *args, k=0, **kwargs):
        return a

    arg = object()
    entries = iter([evalframe.Entry(lambda f_locals: f_locals["a"] is arg, g.__code__)])
    rec = Recorder({f.__code__: lambda frame, size: next(entries, None)})
    with installed(rec):
        for _ in range(10):
            f(arg, 1, k=2, z=3)  # the first caches the entry; the rest hit
        gc.collect()
        before = sys.getrefcount(arg)
        for _ in range(1000):
            f(arg, 1, k=2, z=3)
            f(0, 1, k=2, z=3)  # a miss answered None
        gc.collect()
        after = sys.getrefcount(arg)
    assert before == after
