"""A cached entry's code runs in place of the frame with the frame's arguments,
globals, builtins and closure; its result or exception is the frame's."""

from __future__ import annotations

import sys
import traceback
import types

import pytest
from evalframe_testkit import Recorder, always, entry_for, installed, never, stats

import evalframe


def original(a, b=2, /, c=3, *args, d, e=5, **kwargs):
    return ("original", a, b, c, args, d, e, kwargs)


def transformed(a, b=2, /, c=3, *args, d, e=5, **kwargs):
    return ("transformed", a, b, c, args, d, e, kwargs)


CALL_SHAPES = [
    ((1,), {"d": 4}),
    ((1, 20), {"d": 4}),
    ((1, 20, 30), {"d": 4, "e": 50}),
    ((1, 20, 30, 40, 41), {"d": 4}),
    ((1,), {"c": 30, "d": 4, "x": 9}),
    ((1, 2), {"d": 4, "a": "posonly-name-in-kwargs"}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALL_SHAPES)
def test_entry_runs_with_every_kind_of_argument(slow_path, args, kwargs):
    rec = Recorder({original.__code__: entry_for(transformed.__code__)})
    with installed(rec):
        first = original(*args, **kwargs)  # miss: the callback's entry runs
        second = original(*args, **kwargs)  # hit
    assert first == transformed(*args, **kwargs)
    assert second == transformed(*args, **kwargs)
    assert rec.count("original") == 1


def test_no_room_path_is_the_path_taken_when_forced(slow_path):
    before = stats()
    rec = Recorder({original.__code__: entry_for(transformed.__code__)})
    with installed(rec):
        original(1, d=2)
    after = stats()
    moved = (after["relocated"] - before["relocated"]) + (after["called"] - before["called"])
    if slow_path:
        assert moved == 1
    else:
        assert after["in_place"] - before["in_place"] == 1


def test_guard_sees_arguments_by_name_and_free_variables():
    seen = []

    def guard(f_locals):
        seen.append(dict(f_locals))
        return True

    def make(captured, unset_later):
        def closure_fn(a, *rest, k=0, **kw):
            return a, rest, k, kw, captured, unset_later

        return closure_fn

    template = make(None, None)
    # An empty cell (a free variable not yet assigned) is absent from the guard's dict.
    closure = (types.CellType("cell value"), types.CellType())
    closure_fn = types.FunctionType(
        template.__code__, globals(), "closure_fn", template.__defaults__, closure
    )
    closure_fn.__kwdefaults__ = template.__kwdefaults__
    rec = Recorder({closure_fn.__code__: entry_for(closure_fn.__code__, guard)})
    with installed(rec):
        for _ in range(2):  # a miss, then a hit: the guard runs, then the code
            with pytest.raises(NameError):
                closure_fn(1, 2, 3, k=4, z=5)
    assert seen == [{"a": 1, "rest": (2, 3), "k": 4, "kw": {"z": 5}, "captured": "cell value"}]


def test_entries_are_tried_newest_first_and_first_true_guard_wins():
    def f(x):
        return "original"

    def g1(x):
        return "first"

    def g2(x):
        return "second"

    order = []

    def guard_named(name, result):
        def guard(f_locals):
            order.append(name)
            return result(f_locals["x"])

        return guard

    answers = iter(
        [
            evalframe.Entry(guard_named("old", lambda x: True), g1.__code__),
            evalframe.Entry(guard_named("new", lambda x: x > 0), g2.__code__),
        ]
    )
    rec = Recorder({f.__code__: lambda frame, size: next(answers)})
    with installed(rec):
        assert f(1) == "first"  # callback, first entry runs
        order.clear()
        assert f(-1) == "first"  # hit on the only entry
        assert f(-1) == "first"
        assert order == ["old", "old"]
    rec.answers[f.__code__] = lambda frame, size: next(answers)
    evalframe.clear_cache(f.__code__)
    entries = iter([evalframe.Entry(never, g1.__code__), evalframe.Entry(always, g2.__code__)])
    sizes = []

    def cb(frame, size):
        if frame.f_code is f.__code__:
            sizes.append(size)
            return next(entries)
        return None

    with installed(cb):
        assert f(1) == "first"  # miss (cache empty): Entry(never, g1) runs
        assert f(1) == "second"  # miss again (never): Entry(always, g2) runs
        assert f(1) == "second"  # hit on the newest entry
    assert sizes == [0, 1]
    assert [e.code for e in evalframe.cache_entries(f.__code__)] == [g2.__code__, g1.__code__]


def test_entry_code_uses_the_frames_globals_and_builtins():
    namespace = {"OFFSET": 100, "__builtins__": {"len": lambda x: -1}}
    exec("def f(x):\n    return x\n", namespace)
    elsewhere: dict[str, object] = {"OFFSET": 0}
    exec("def g(x):\n    return x + OFFSET + len([])\n", elsewhere)
    f = namespace["f"]
    rec = Recorder({f.__code__: entry_for(elsewhere["g"].__code__)})
    with installed(rec):
        assert f(1) == 1 + 100 - 1
        assert f(2) == 2 + 100 - 1


def test_entry_code_shares_the_closure_cells(slow_path):
    def make():
        count = 0

        def bump(step):
            nonlocal count
            count += step
            return count

        def bump_twice(step):
            nonlocal count
            count += 2 * step
            return count

        return bump, bump_twice, lambda: count

    bump, bump_twice, read = make()
    rec = Recorder({bump.__code__: entry_for(bump_twice.__code__)})
    with installed(rec):
        assert bump(1) == 2
        assert bump(5) == 12
    assert read() == 12
    assert bump(1) == 13  # unhooked again: the original runs on the same cell


def test_cell_arguments_become_cells_of_the_entry_code(slow_path):
    def f(x):
        def inner():
            return x

        return inner()

    def g(x):
        def inner():
            return x * 10

        return inner()

    rec = Recorder({f.__code__: entry_for(g.__code__)})
    with installed(rec):
        assert f(3) == 30
        assert f(4) == 40


def test_entry_code_with_more_locals_and_a_deeper_stack(slow_path):
    names = [f"v{i}" for i in range(300)]
    body = "".join(f"    {n} = x + {i}\n" for i, n in enumerate(names))
    deep = "(x, " * 150 + "x" + ")" * 150  # nested tuples: one stack slot per level
    source = f"def big(x):\n{body}    return ({' + '.join(names)}), {deep}\n"
    scratch = {}
    exec(source, scratch)
    big = scratch["big"]

    def small(x):
        return x

    assert big.__code__.co_nlocals > 300 and big.__code__.co_stacksize > 100
    rec = Recorder({small.__code__: entry_for(big.__code__)})
    with installed(rec):
        results = [small(i) for i in range(5)]
    assert results == [big(i) for i in range(5)]


def test_recursion_through_an_entry_grows_frames_across_stack_chunks():
    # Many nested frames of a bigger code fill stack chunks, so some calls find
    # no room after their frame and take the no-room path on their own.
    padding = "".join(f"    p{i} = n\n" for i in range(200))
    scratch = {}
    exec(
        "def rec_orig(n):\n    return 0 if n == 0 else 1 + rec_orig(n - 1)\n"
        f"def rec_big(n):\n{padding}    return 0 if n == 0 else 2 + rec_orig(n - 1)\n",
        scratch,
    )
    rec_orig, rec_big = scratch["rec_orig"], scratch["rec_big"]
    before = stats()
    rec = Recorder({rec_orig.__code__: entry_for(rec_big.__code__)})
    with installed(rec):
        assert rec_orig(150) == 300
        assert rec_orig(150) == 300
    after = stats()
    assert rec.count("rec_orig") == 1
    moved = (after["relocated"] - before["relocated"]) + (after["called"] - before["called"])
    assert moved > 0
    assert rec_orig(10) == 10


def test_exception_from_entry_code_reaches_the_caller_with_its_traceback(slow_path):
    def f(x):
        return x

    def g(x):
        raise ValueError(f"bad {x}")

    rec = Recorder({f.__code__: entry_for(g.__code__)})
    with installed(rec):
        for _ in range(2):  # miss, then hit
            with pytest.raises(ValueError, match="bad 7") as info:
                f(7)
            names = [fs.name for fs in traceback.extract_tb(info.value.__traceback__)]
            assert names[-1] == "g"
    assert f(7) == 7


def leaf(x):
    return x + 1


def leaf_fast(x):
    return x + 1000


def outer(x):
    return x


def outer_new(x):
    return leaf(x) * 2


def test_nested_frames_started_by_entry_code_are_hooked():
    rec = Recorder(
        {
            outer.__code__: entry_for(outer_new.__code__),
            leaf.__code__: entry_for(leaf_fast.__code__),
        }
    )
    with installed(rec):
        assert outer(1) == 2002
    assert [call[0] for call in rec.calls] == ["outer", "leaf"]


def test_recursive_hooked_function_hits_its_own_entry():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def fact_counted(n):
        return 1 if n <= 1 else n * fact(n - 1)

    rec = Recorder({fact.__code__: entry_for(fact_counted.__code__)})
    before = stats()["hits"]
    with installed(rec):
        assert fact(30) == 265252859812191058636308480000000
    assert rec.count("fact") == 1
    assert stats()["hits"] - before == 29


def test_module_level_code_can_be_replaced(slow_path):
    module_code = compile("result = 1\n", "<mod>", "exec")
    replacement = compile("result = [2, __name__]\n", "<mod>", "exec")
    rec = Recorder({module_code: entry_for(replacement), replacement: entry_for(module_code)})
    namespace: dict[str, object] = {"__name__": "mod"}
    with installed(rec):
        exec(module_code, namespace)
    assert namespace["result"] == [2, "mod"]
    assert [call[0] for call in rec.calls] == ["<module>"]  # the replacement was not offered


def test_class_body_can_be_replaced(slow_path):
    def make(value):
        class Body:
            attr = value

        return Body

    body_code = next(c for c in make.__code__.co_consts if hasattr(c, "co_name"))
    ns: dict[str, object] = {}
    exec("def make(value):\n    class Body:\n        attr = value * 10\n    return Body\n", ns)
    other_code = next(c for c in ns["make"].__code__.co_consts if hasattr(c, "co_name"))
    rec = Recorder({body_code: entry_for(other_code)})
    with installed(rec):
        assert make(4).attr == 40
        assert make(5).attr == 50
    assert rec.count("Body") == 1


def test_entry_code_bigger_than_a_fresh_stack_chunk(slow_path):
    # 3000 locals do not fit in a 16 KiB stack chunk even when the frame starts one.
    body = "".join(f"    w{i} = x\n" for i in range(3000))
    scratch: dict[str, object] = {}
    exec(f"def huge(x):\n{body}    return w0 + w2999 + x\n", scratch)
    huge = scratch["huge"]

    def tiny(x):
        return x

    # Frames of 0..15 extra words before the nested calls shift where tiny's frame
    # lands, so that at some depth it starts a fresh chunk of its own.
    shifters = []
    for k in range(16):
        ns: dict[str, object] = {}
        pad = "".join(f"    s{i} = None\n" for i in range(k))
        exec(f"def shift(f, depth, x):\n{pad}    return f(depth, x)\n", ns)
        shifters.append(ns["shift"])

    def call_tiny_nested(depth, x):
        return tiny(x) if depth == 0 else call_tiny_nested(depth - 1, x)

    # Every depth (not a stride): with 16 shifts each, the tiny frame lands at every offset
    # from a chunk end on any 3.12.x (3.12.3 lays frames out unlike 3.12.1).
    depths = range(0, 320)
    before = stats()
    rec = Recorder({tiny.__code__: entry_for(huge.__code__)})
    with installed(rec):
        got = [shift(call_tiny_nested, d, d) for d in depths for shift in shifters]
    after = stats()
    assert got == [huge(d) for d in depths for _ in shifters]
    if sys.version_info >= (3, 12) and not slow_path:
        # At some depth the small frame starts a new chunk of its own; moving it
        # out must drop that chunk (CPython keeps no empty chunk on its stack).
        assert after["chunk_replaced"] > before["chunk_replaced"]


def endless(n):
    return endless(n + 1)


def endless_entry(n):
    return endless(n + 2)


@pytest.mark.parametrize("answer", ["entry", "none"])
def test_runaway_recursion_under_the_hook_is_a_recursion_error_and_recovers(answer):
    factory = entry_for(endless_entry.__code__) if answer == "entry" else (lambda f, s: None)
    rec = Recorder({endless.__code__: factory})
    with installed(rec):
        with pytest.raises(RecursionError):
            endless(0)
        assert outer(1) == 1  # the interpreter is usable at once
    # With an entry cached, every deeper frame hit it; with None, each one asked.
    assert (rec.count("endless") == 1) == (answer == "entry")


def test_guard_dict_has_the_keys_and_values_of_f_locals_at_frame_start():
    def make():
        free = [1]

        def fn(a, b=2, *args, k, **kw):
            cell = a

            def uses():
                return cell, b, free

            return uses()

        return fn

    fn = make()
    at_start = []
    given = []

    def guard(f_locals):
        given.append(dict(f_locals))
        return True

    def answer(frame, size):
        at_start.append(dict(frame.f_locals))
        return evalframe.Entry(guard, frame.f_code)

    rec = Recorder({fn.__code__: answer})
    with installed(rec):
        assert fn(1, 3, 4, k=5, z=6) == (1, 3, [1])
        assert fn(1, 3, 4, k=5, z=6) == (1, 3, [1])
    expected = {"a": 1, "b": 3, "args": (4,), "k": 5, "kw": {"z": 6}, "free": [1]}
    assert at_start == [expected]
    assert given == [expected]


def test_huge_original_frame_retargeted_to_a_small_code(slow_path):
    # The reverse of the test above: the frame the caller pushed is far bigger than
    # the entry code needs (moving it must copy only what the new code uses).
    body = "".join(f"    w{i} = x\n" for i in range(3000))
    scratch: dict[str, object] = {}
    exec(f"def huge(x):\n{body}    return w0 + x\n", scratch)
    huge = scratch["huge"]

    def tiny(x):
        return x + 1

    rec = Recorder({huge.__code__: entry_for(tiny.__code__)})
    with installed(rec):
        assert [huge(i) for i in range(50)] == [tiny(i) for i in range(50)]
