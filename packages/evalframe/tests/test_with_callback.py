"""with_callback(cb, fn): fn runs with cb as the thread's callback; the state comes back exactly."""

from __future__ import annotations

import functools
import gc
import sys
import threading

import pytest
from evalframe_testkit import Recorder, entry_for, installed

import evalframe


def target(x):
    return ("original", x)


def target_fast(x):
    return ("entry", x)


def compiled_recorder() -> Recorder:
    return Recorder({target.__code__: entry_for(target_fast.__code__)})


def test_frames_started_inside_see_the_callback_and_the_previous_comes_back():
    rec = compiled_recorder()
    run = evalframe.with_callback(rec, lambda x: (target(x), evalframe.get_callback()))
    assert evalframe.get_callback() is None
    assert run(1) == (("entry", 1), rec)
    assert run(2) == (("entry", 2), rec)
    assert rec.count("target") == 1  # compiled once, then the cached entry ran
    assert evalframe.get_callback() is None
    assert target(3) == ("original", 3)  # no hook outside


def test_it_replaces_and_restores_another_callback():
    outer, inner = Recorder({}), compiled_recorder()
    with installed(outer):
        run = evalframe.with_callback(inner, lambda: (evalframe.get_callback(), target(1)))
        assert run() == (inner, ("entry", 1))
        assert evalframe.get_callback() is outer


def test_the_state_comes_back_when_fn_raises_or_leaves_a_callback_set():
    rec = Recorder({})

    def boom():
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        evalframe.with_callback(rec, boom)()
    assert evalframe.get_callback() is None

    def leaves_one():
        evalframe.set_callback(Recorder({}))

    evalframe.with_callback(rec, leaves_one)()
    assert evalframe.get_callback() is None


def test_run_only_depth_is_kept_so_the_callback_is_not_called_inside_run_only():
    rec = compiled_recorder()
    run = evalframe.with_callback(rec, target)
    assert run(1) == ("entry", 1)
    with evalframe.run_only():
        # cached entries run, misses run as they are, rec is not asked
        assert run(2) == ("entry", 2)
        assert evalframe.with_callback(rec, target_fast)(3) == ("entry", 3)
    assert rec.count("target") == 1
    assert rec.count("target_fast") == 0


def test_nesting_with_without_hook_and_itself():
    a, b = compiled_recorder(), Recorder({})
    seen = evalframe.with_callback(
        a,
        lambda: (
            evalframe.get_callback(),
            evalframe.without_hook(evalframe.get_callback)(),
            evalframe.with_callback(b, evalframe.get_callback)(),
            evalframe.get_callback(),
        ),
    )()
    assert seen == (a, None, b, a)
    assert evalframe.get_callback() is None


def test_threads_have_their_own_callbacks():
    recs = [compiled_recorder() for _ in range(4)]
    results: list[object] = [None] * 4
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        def inside():
            barrier.wait()
            return evalframe.get_callback() is recs[i] and target(i) == ("entry", i)

        results[i] = evalframe.with_callback(recs[i], inside)()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4


def test_arguments_binding_attributes_and_update_wrapper():
    def f(a, b=2, *rest, c, **kw):
        """doc of f"""
        return (a, b, rest, c, kw)

    rec = Recorder({})
    wrapped = evalframe.with_callback(rec, f)
    assert wrapped(1, 5, 6, c=8, d=9) == (1, 5, (6,), 8, {"d": 9})
    assert wrapped.__wrapped__ is f
    assert wrapped.callback is rec
    functools.update_wrapper(wrapped, f)
    assert wrapped.__name__ == "f" and wrapped.__doc__ == "doc of f"
    wrapped.extra = 1
    assert wrapped.extra == 1

    class Holder:
        method = evalframe.with_callback(rec, lambda self, x: (type(self).__name__, x))

    assert Holder().method(3) == ("Holder", 3)


def test_bad_input_is_a_type_error():
    with pytest.raises(TypeError, match="two callables"):
        evalframe.with_callback(1, print)
    with pytest.raises(TypeError, match="two callables"):
        evalframe.with_callback(print, None)
    with pytest.raises(TypeError):
        evalframe.with_callback(print)
    with pytest.raises(TypeError, match="keyword"):
        evalframe.with_callback(callback=print, fn=print)


def test_no_reference_leak_over_many_calls():
    rec = Recorder({})
    run = evalframe.with_callback(rec, lambda x: x)
    token = object()
    for _ in range(1000):
        run(token)
    gc.collect()
    before = sys.getrefcount(token), sys.getrefcount(rec)
    for _ in range(100_000):
        run(token)
    assert (sys.getrefcount(token), sys.getrefcount(rec)) == before


def test_wrappers_are_atomic_under_copy_and_deepcopy_like_functions():
    import copy

    rec = Recorder({})
    for wrapper in (evalframe.with_callback(rec, target), evalframe.without_hook(target)):
        assert copy.copy(wrapper) is wrapper
        holder = {"w": wrapper, "data": [1]}
        cloned = copy.deepcopy(holder)
        assert cloned["w"] is wrapper and cloned["data"] is not holder["data"]
