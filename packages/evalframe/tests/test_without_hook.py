"""without_hook(fn): fn runs with the thread's hook off; the state comes back exactly."""

from __future__ import annotations

import functools
import gc
import inspect
import sys
import threading
import weakref

import pytest
from evalframe_testkit import Recorder, entry_for, installed

import evalframe
from evalframe import _evalframe


def target(x):
    return ("original", x)


def target_fast(x):
    return ("entry", x)


def compiled_recorder() -> Recorder:
    """A callback that caches target_fast's code for target."""
    return Recorder({target.__code__: entry_for(target_fast.__code__)})


def test_frames_started_inside_run_untouched_and_uncached():
    rec = compiled_recorder()
    with installed(rec):
        assert target(1) == ("entry", 1)  # cached now
        seen = evalframe.without_hook(lambda: (target(2), _evalframe.get_callback()))()
        assert seen == (("original", 2), None)  # the entry did not run, no callback
        assert target(3) == ("entry", 3)  # hooked again after
        assert _evalframe.get_callback() is rec
    assert rec.count("target") == 1


def test_arguments_keywords_and_result_pass_through():
    def f(a, b=2, *rest, c, **kw):
        return (a, b, rest, c, kw)

    wrapped = evalframe.without_hook(f)
    assert wrapped(1, c=3) == (1, 2, (), 3, {})
    assert wrapped(1, 5, 6, 7, c=8, d=9) == (1, 5, (6, 7), 8, {"d": 9})
    assert wrapped(*[1], **{"c": 0}) == (1, 2, (), 0, {})
    assert wrapped.__wrapped__ is f


def test_a_frame_evaluation_hook_is_uninstalled_while_fn_runs_alone():
    # The only active thread turns off: the eval-frame function goes, so fn's own
    # Python calls are inlined again; it is back after.
    def inside():
        return _evalframe._stats()["active_threads"]

    with installed(compiled_recorder()):
        before = _evalframe._stats()["active_threads"]
        assert evalframe.without_hook(inside)() == before - 1 == 0
        assert _evalframe._stats()["active_threads"] == before


def test_exception_from_fn_propagates_and_the_callback_is_restored():
    rec = compiled_recorder()

    def boom(x):
        target(x)
        raise KeyError(x)

    with installed(rec):
        with pytest.raises(KeyError) as info:
            evalframe.without_hook(boom)(7)
        assert info.value.args == (7,)
        assert _evalframe.get_callback() is rec
        assert target(1) == ("entry", 1)
    assert rec.count("target") == 1


def test_nested_without_hook_restores_each_level():
    rec = compiled_recorder()
    levels = []

    def inner():
        levels.append(("inner", _evalframe.get_callback()))
        return target(0)

    def outer():
        levels.append(("outer-before", _evalframe.get_callback()))
        result = evalframe.without_hook(inner)()
        levels.append(("outer-after", _evalframe.get_callback()))
        return result

    with installed(rec):
        assert evalframe.without_hook(outer)() == ("original", 0)
        assert _evalframe.get_callback() is rec
    assert levels == [("outer-before", None), ("inner", None), ("outer-after", None)]
    assert rec.count("target") == 0


def test_callback_set_inside_fn_applies_there_and_is_dropped_after():
    outer_rec = compiled_recorder()
    inner_rec = compiled_recorder()

    class Callback:
        def __call__(self, frame, size):
            return inner_rec(frame, size)

    kept = [Callback()]
    watch = weakref.ref(kept[0])

    def leaves_a_callback_set():
        evalframe.set_callback(kept[0])  # installed and never restored by fn
        return target(4)

    with installed(outer_rec):
        assert evalframe.without_hook(leaves_a_callback_set)() == ("entry", 4)
        assert _evalframe.get_callback() is outer_rec
    assert inner_rec.count("target") == 1
    kept.clear()
    gc.collect()
    assert watch() is None  # the wrapper's restore dropped its reference


def test_inside_run_only_cached_entries_are_off_and_run_only_comes_back():
    rec = compiled_recorder()
    with installed(rec):
        target(0)  # caches the entry
    with evalframe.run_only():
        assert target(1) == ("entry", 1)
        assert evalframe.without_hook(target)(2) == ("original", 2)
        assert evalframe.without_hook(lambda: target(3))() == ("original", 3)
        assert target(4) == ("entry", 4)  # still run-only after
        with pytest.raises(ZeroDivisionError):
            evalframe.without_hook(lambda: 1 // 0)()
        assert target(5) == ("entry", 5)
    assert target(6) == ("original", 6)  # run_only() ended as usual
    with pytest.raises(RuntimeError):
        _evalframe._exit_run_only()  # depth back to 0, not below


def test_run_only_entered_inside_fn_and_left_open_is_undone():
    rec = compiled_recorder()
    with installed(rec):
        target(0)

    def enters_run_only():
        _evalframe._enter_run_only()  # never left by fn
        return target(1)

    assert evalframe.without_hook(enters_run_only)() == ("entry", 1)
    assert target(2) == ("original", 2)  # no run-only left behind
    assert _evalframe._stats()["active_threads"] == 0


def test_recursion_through_the_wrapper_restores_at_every_depth():
    rec = compiled_recorder()
    seen = []

    def down(n):
        seen.append(_evalframe.get_callback())
        if n == 0:
            return target(n)
        with installed(rec):  # each level turns the hook on again, then calls the wrapper
            return wrapped(n - 1)

    wrapped = evalframe.without_hook(down)
    with installed(rec):
        assert wrapped(200) == ("original", 0)
        assert _evalframe.get_callback() is rec
    assert seen == [None] * 201


def test_runaway_recursion_through_the_wrapper_is_a_recursion_error():
    rec = compiled_recorder()

    def forever(n):
        return wrapped(n + 1)

    wrapped = evalframe.without_hook(forever)
    with installed(rec):
        with pytest.raises(RecursionError):
            wrapped(0)
        assert _evalframe.get_callback() is rec
        assert target(1) == ("entry", 1)


def test_threads_keep_their_own_hook_while_another_runs_without_it():
    rec_a, rec_b = compiled_recorder(), compiled_recorder()
    a_inside, b_done = threading.Event(), threading.Event()
    results: dict[str, object] = {}
    errors: list[BaseException] = []

    def a_body():
        def inside():
            a_inside.set()
            assert b_done.wait(10)
            return target("a")

        try:
            with installed(rec_a):
                results["a-inside"] = evalframe.without_hook(inside)()
                results["a-after"] = target("a2")
                results["a-callback"] = _evalframe.get_callback() is rec_a
        except BaseException as exc:  # reported below
            errors.append(exc)

    def b_body():
        try:
            assert a_inside.wait(10)
            with installed(rec_b):
                results["b"] = target("b")  # B is hooked while A runs without
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
    assert results == {
        "a-inside": ("original", "a"),
        "a-after": ("entry", "a2"),
        "a-callback": True,
        "b": ("entry", "b"),
    }
    assert _evalframe._stats()["active_threads"] == 0


def test_no_reference_leaks_over_100k_calls():
    rec = compiled_recorder()
    arg = object()

    def fn(x, *, key=None):
        if key == "raise":
            raise ValueError(x)
        return x

    wrapped = evalframe.without_hook(fn)
    with installed(rec):
        for _ in range(1000):  # warm up caches and counters
            wrapped(arg, key=None)
        counts = (sys.getrefcount(rec), sys.getrefcount(fn), sys.getrefcount(arg))
        gc.collect()
        blocks = sys.getallocatedblocks()
        for i in range(100_000):
            wrapped(arg)
            if i % 10 == 0:
                try:
                    wrapped(arg, key="raise")
                except ValueError:
                    pass
        after = (sys.getrefcount(rec), sys.getrefcount(fn), sys.getrefcount(arg))
        gc.collect()
        grown = sys.getallocatedblocks() - blocks
    assert after == counts
    assert grown < 100  # 110k calls: a leak per call would show as >= 100k blocks


def test_a_cycle_through_the_wrapper_is_collected():
    class Holder:
        def itself(self):
            return self

    holder = Holder()
    holder.wrapped = evalframe.without_hook(holder.itself)  # holder -> wrapper -> holder
    watch = weakref.ref(holder)
    del holder
    gc.collect()
    assert watch() is None


def test_binds_as_a_method_and_takes_attributes():
    class A:
        method = evalframe.without_hook(lambda self, x: (self, x))

    a = A()
    assert a.method(1) == (a, 1)
    assert A.method(a, 2) == (a, 2)
    wrapped = evalframe.without_hook(len)
    wrapped.note = "kept"
    assert wrapped.note == "kept"
    assert wrapped([1, 2]) == 2
    assert "without_hook" in repr(wrapped)


def test_functools_update_wrapper_works_and_wrapped_cannot_be_swapped():
    def f(a, b=1):
        """doc of f"""
        return a + b

    wrapped = functools.update_wrapper(evalframe.without_hook(f), f)
    assert (wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == ("f", "doc of f", f)
    assert str(inspect.signature(wrapped)) == "(a, b=1)"
    assert wrapped(2) == 3
    with pytest.raises(AttributeError, match="cannot be changed"):
        wrapped.__wrapped__ = len
    assert wrapped.__wrapped__ is f


def test_a_non_callable_is_a_type_error():
    with pytest.raises(TypeError, match="takes a callable"):
        evalframe.without_hook(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        evalframe.without_hook()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        evalframe.without_hook(len, len)  # type: ignore[call-arg]
