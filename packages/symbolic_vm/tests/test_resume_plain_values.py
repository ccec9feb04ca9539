"""Residual code and resume functions on plain Python values: runs without torch.

The same constructs as test_resume.py (conditional jumps, pending calls with NULLs, with blocks,
loops, try/finally, closures, cells), with ints and lists, so that it runs on every CPython the
bytecode toolkit supports, torch installed or not:

    PYTHONPATH=packages/symbolic_vm/src <python3.12> -m pytest --noconftest -p no:cacheprovider \
        packages/symbolic_vm/tests/test_resume_plain_values.py
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any

import pytest

from symbolic_vm.breaks.flow import why_not_break_at, with_exit_slot, with_exit_slots
from symbolic_vm.breaks.resume import (
    BreakPlan,
    Const,
    Local,
    Null,
    Reenter,
    ResumeBuilder,
    Slot,
    Value,
    WithExit,
    instructions_at,
    positional_helper,
)
from symbolic_vm.bytecode import PY_VERSION


def call_slots(func: Slot, *args: Slot) -> tuple[Slot, ...]:
    if PY_VERSION >= (3, 13):
        return (func, Null(), *args)
    return (Null(), func, *args)


def call_offset(fn: Callable[..., Any], callee: str) -> int:
    pending = False
    for ins in instructions_at(fn.__code__):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD") and ins.arg == callee:
            pending = True
        elif pending and ins.opname in ("PRECALL", "CALL", "CALL_KW"):
            assert ins.offset is not None
            return ins.offset
    raise AssertionError(f"no call of {callee}")


def jump_offset(fn: Callable[..., Any]) -> int:
    for ins in instructions_at(fn.__code__):
        if ins.opname.startswith("POP_JUMP"):
            assert ins.offset is not None
            return ins.offset
    raise AssertionError("no conditional jump")


def run_broken(
    fn: Callable[..., Any],
    helper: Callable[..., Any],
    *,
    offset: int,
    stack: tuple[Slot, ...],
    live: tuple[tuple[str, Slot], ...],
    helper_args: tuple[str, ...],
) -> types.FunctionType:
    assert isinstance(fn, types.FunctionType)
    counter = itertools.count(1)
    builder = ResumeBuilder(lambda: next(counter))
    built = builder.residual(BreakPlan(fn.__code__, offset, stack, live, "__helper", helper_args))
    g: dict[str, object] = dict(fn.__globals__)
    g["__helper"] = helper
    g.update(built.globals_to_install(g))
    return types.FunctionType(built.code, g, fn.__name__, fn.__defaults__, fn.__closure__)


EVENTS: list[object] = []


def note(value: object) -> None:
    EVENTS.append(value)


@pytest.fixture(autouse=True)
def _clear_events() -> None:
    EVENTS.clear()


def branchy(a: int, b: int) -> int:
    x = a * 2
    if b < 0:
        b = -b
    return x * b


@pytest.mark.parametrize("b", [3, -3])
def test_conditional_jump_continues_in_the_branch_taken(b: int) -> None:
    new = run_broken(
        branchy,
        lambda a, b: (a * 2, b < 0, b),
        offset=jump_offset(branchy),
        stack=(Value(1),),
        live=(("x", Value(0)), ("b", Value(2))),
        helper_args=("a", "b"),
    )
    assert new(5, b) == branchy(5, b) == 30


def pair(a: int, unused: object, b: int) -> int:
    return a * 10 + b


def note_among_arguments(a: int, b: int) -> int:
    c = a + 1
    return pair(c, note(c), b) + len(str(note(b)))


def test_pending_calls_and_nulls_survive_the_break() -> None:
    new = run_broken(
        note_among_arguments,
        lambda a, b: (a + 1, b),
        offset=call_offset(note_among_arguments, "note"),
        stack=(*call_slots(Const(pair), Value(0)), *call_slots(Const(note), Value(0))),
        live=(("c", Value(0)), ("b", Value(1))),
        helper_args=("a", "b"),
    )
    result = new(4, 7)
    events = list(EVENTS)
    EVENTS.clear()
    assert result == note_among_arguments(4, 7) == 61
    assert events == EVENTS == [5, 7]


class Recorder:
    """A re-enterable context manager that records enters and exits."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Recorder:
        EVENTS.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        EVENTS.append(f"exit {self.name} {exc[0].__name__ if exc[0] else None}")


def inside_with(x: int, m: Recorder) -> int:
    with m:
        y = x + 1
        note(y)
        y = y * 2
    return y


def test_with_block_is_exited_before_and_entered_again_after_the_break() -> None:
    new = run_broken(
        inside_with,
        lambda x, m: (m, x + 1),
        offset=call_offset(inside_with, "note"),
        stack=(WithExit(0), *call_slots(Const(note), Value(1))),
        live=(("y", Value(1)),),
        helper_args=("x", "m"),
    )
    assert new(3, Recorder("m")) == 8
    # The prologue helper stands for the graph, so it does not enter; the residual code does.
    assert EVENTS == ["enter m", 4, "exit m None", "enter m", "exit m None"]


def raises(value: object) -> None:
    raise KeyError(value)


def raising_inside_with(x: int, m: Recorder) -> int:
    with m:
        raises(x)
    return x


def test_exception_at_the_break_exits_the_with_block_and_propagates() -> None:
    new = run_broken(
        raising_inside_with,
        lambda x, m: (m, x),
        offset=call_offset(raising_inside_with, "raises"),
        stack=(WithExit(0), *call_slots(Const(raises), Value(1))),
        live=(("x", Value(1)),),
        helper_args=("x", "m"),
    )
    with pytest.raises(KeyError):
        new(3, Recorder("m"))
    assert EVENTS == ["enter m", "exit m KeyError"]


def loop_with_note(xs: list[int]) -> int:
    total = 0
    for v in xs:
        total += v
        note(v)
    return total


def test_break_in_a_loop_continues_the_iteration() -> None:
    def helper(xs: list[int]) -> tuple[object, ...]:
        it = iter(xs)
        v = next(it)
        return (it, v, v)

    new = run_broken(
        loop_with_note,
        helper,
        offset=call_offset(loop_with_note, "note"),
        stack=(Value(0), *call_slots(Const(note), Value(1))),
        live=(("total", Value(2)), ("v", Value(1))),
        helper_args=("xs",),
    )
    assert new([1, 2, 3]) == 6
    assert EVENTS == [1, 2, 3]


def try_finally(x: int, fail: bool) -> int:
    try:
        x += 1
        note(x)
        if fail:
            raise ValueError(x)
    finally:
        note("finally")
    return x


@pytest.mark.parametrize("fail", [False, True])
def test_finally_runs_in_the_resume_function(fail: bool) -> None:
    new = run_broken(
        try_finally,
        lambda x, fail: (x + 1, fail),
        offset=call_offset(try_finally, "note"),
        stack=call_slots(Const(note), Value(0)),
        live=(("x", Value(0)), ("fail", Value(1))),
        helper_args=("x", "fail"),
    )
    if fail:
        with pytest.raises(ValueError):
            new(1, fail)
    else:
        assert new(1, fail) == 2
    assert EVENTS == [2, "finally"]


def make_closure(k: int) -> Callable[[int], int]:
    def inner(x: int) -> int:
        y = x * k
        note(y)
        get = lambda: y  # noqa: E731 - makes y a cell variable
        return get() + k

    return inner


def test_closure_and_cell_variables_cross_the_break() -> None:
    inner = make_closure(3)
    new = run_broken(
        inner,
        lambda x, k: (x * k,),
        offset=call_offset(inner, "note"),
        stack=call_slots(Const(note), Value(0)),
        live=(("y", Value(0)),),
        helper_args=("x", "k"),
    )
    assert new(5) == inner(5) == 18


def make_counted() -> tuple[Callable[..., Any], Callable[..., Any]]:
    count = 0

    def fn(a: int, *rest: int, scale: int, **opts: int) -> tuple[int, int]:
        nonlocal count
        count += 1
        y = (a + sum(rest)) * scale + len(opts)
        note(y)
        return y, count

    def helper(a: int, *rest: int, scale: int, **opts: int) -> tuple[object, ...]:
        # Stands for the prologue the VM generates: same signature, replays `count += 1`.
        nonlocal count
        count += 1
        return ((a + sum(rest)) * scale + len(opts),)

    return fn, helper


def test_inlined_helper_reads_every_argument_kind_and_writes_the_frames_cells() -> None:
    fn, helper = make_counted()
    flat, names = positional_helper(helper.__code__)
    assert names == ("a", "scale", "rest", "opts")
    assert isinstance(fn, types.FunctionType)
    counter = itertools.count(1)
    built = ResumeBuilder(lambda: next(counter)).residual(
        BreakPlan(
            fn.__code__,
            call_offset(fn, "note"),
            call_slots(Const(note), Value(0)),
            (("y", Value(0)),),
            "unused",
            names,
            helper_code=flat,
        )
    )
    new = types.FunctionType(built.code, dict(fn.__globals__), "fn", None, fn.__closure__)
    g = new.__globals__
    g.update(built.globals_to_install(g))
    assert new(1, 2, 3, scale=2, k=0) == (13, 1)
    assert fn(1, 2, 3, scale=2, k=0) == (13, 2)  # the same cell: the helper's write is real
    assert new(0, scale=1) == (0, 3)
    assert EVENTS == [13, 13, 0]
    # Inlined: the residual code calls no helper function (no frame for the hook to compile).
    made = [c.co_name for c in built.code.co_consts if isinstance(c, types.CodeType)]
    assert made == [r.name for r in built.resumes]  # only the resume function (it has a closure)


def two_notes(x: int) -> int:
    y = x + 1
    note(y)
    z = y * 2
    note(z)
    return z + 1


def test_break_inside_a_resume_function_resumes_from_the_original_code() -> None:
    counter = itertools.count(1)
    builder = ResumeBuilder(lambda: next(counter))
    first = builder.residual(BreakPlan(
        two_notes.__code__, call_offset(two_notes, "note"),
        call_slots(Const(note), Value(0)), (("x", Value(1)), ("y", Value(0))),
        "__helper", ("x",),
    ))
    (r1,) = first.resumes
    assert r1.code.co_varnames[: r1.code.co_argcount] == ("___stack0", "x", "y")
    # Now r1's frame breaks at the second note(): its code has the first call too (unreached).
    second_call = [
        i.offset for i in instructions_at(r1.code)
        if i.opname in ("PRECALL", "CALL") and i.offset is not None
    ]
    offset = second_call[-2] if PY_VERSION == (3, 11) else second_call[-1]
    plan = BreakPlan(
        r1.code, offset, call_slots(Const(note), Value(0)),
        (("___stack0", Const(None)), ("x", Value(1)), ("y", Value(2)), ("z", Value(0))),
        "__helper", ("x", "y"),
    )
    second = builder.residual(plan)
    (r2,) = second.resumes
    original_varnames = set(two_notes.__code__.co_varnames)
    assert set(r2.code.co_varnames) <= original_varnames | {"___stack0"}
    assert r2.code.co_varnames[: r2.code.co_argcount] == ("___stack0", "x", "y", "z")
    # r2's offset is an offset of the original code: right after the second note() call.
    after_second = [
        i.offset for i in instructions_at(two_notes.__code__) if i.opname == "POP_TOP"
    ][-1]
    assert r2.offset == after_second
    g: dict[str, object] = dict(two_notes.__globals__)
    g["__helper"] = lambda x, y: (y * 2, x, y)
    g.update(second.globals_to_install(g))
    run_r1 = types.FunctionType(second.code, g)
    assert run_r1(None, 4, 5) == 11
    assert EVENTS == [10]


def comprehension_shadowing(xs: list[int]) -> tuple[int, list[None]]:
    v = 100
    out = [note(v) for v in xs]
    return v, out


def comprehension_unbound(xs: list[int]) -> list[None]:
    return [note(w) for w in xs]


@pytest.mark.skipif(PY_VERSION < (3, 12), reason="comprehensions are inlined from 3.12 (PEP 709)")
def test_break_in_an_inlined_comprehension_restores_the_shadowed_local() -> None:
    # 3.12+ stack at note(v): the outer v saved by LOAD_FAST_AND_CLEAR, the list, the iterator.
    def helper(xs: list[int]) -> tuple[object, ...]:
        it = iter(xs)
        return (100, [], it, next(it))

    new = run_broken(
        comprehension_shadowing,
        helper,
        offset=call_offset(comprehension_shadowing, "note"),
        stack=(Value(0), Value(1), Value(2), *call_slots(Const(note), Value(3))),
        live=(("xs", Const(None)), ("v", Value(3))),
        helper_args=("xs",),
    )
    assert new([1, 2, 3]) == comprehension_shadowing([1, 2, 3]) == (100, [None] * 3)
    assert EVENTS == [1, 2, 3, 1, 2, 3]


@pytest.mark.skipif(PY_VERSION < (3, 12), reason="comprehensions are inlined from 3.12 (PEP 709)")
def test_break_in_an_inlined_comprehension_keeps_an_unbound_local_unbound() -> None:
    # The saved outer value is a NULL (w was never bound): it is dropped and pushed again.
    def helper(xs: list[int]) -> tuple[object, ...]:
        it = iter(xs)
        return ([], it, next(it))

    new = run_broken(
        comprehension_unbound,
        helper,
        offset=call_offset(comprehension_unbound, "note"),
        stack=(Null(), Value(0), Value(1), *call_slots(Const(note), Value(2))),
        live=(("xs", Const(None)), ("w", Value(2))),
        helper_args=("xs",),
    )
    assert new([4, 5]) == [None, None]
    assert EVENTS == [4, 5]


def test_break_policy_follows_torch_compile_loops_and_try_blocks() -> None:
    # Inside (or before) a loop, and inside a try block: no break. In a with block, or after the
    # last loop: break.
    in_loop = why_not_break_at(loop_with_note.__code__, call_offset(loop_with_note, "note"))
    assert in_loop is not None and "loop" in in_loop
    in_try = why_not_break_at(try_finally.__code__, call_offset(try_finally, "note"))
    assert in_try is not None and "try" in in_try
    assert why_not_break_at(inside_with.__code__, call_offset(inside_with, "note")) is None
    assert why_not_break_at(two_notes.__code__, call_offset(two_notes, "note")) is None


def test_reentered_manager_is_built_from_constants_on_both_sides_of_the_break() -> None:
    # Reenter: the residual code and the resume function each build Recorder("fresh") and enter
    # it; the helper returns no manager at all.
    new = run_broken(
        inside_with,
        lambda x, m: (x + 1,),
        offset=call_offset(inside_with, "note"),
        stack=(Reenter(Recorder, ("fresh",)), *call_slots(Const(note), Value(0))),
        live=(("y", Value(0)),),
        helper_args=("x", "m"),
    )
    assert new(3, Recorder("unused")) == 8
    assert EVENTS == ["enter fresh", 4, "exit fresh None", "enter fresh", "exit fresh None"]


def test_reentered_manager_is_exited_when_the_broken_call_raises() -> None:
    new = run_broken(
        raising_inside_with,
        lambda x, m: (x,),
        offset=call_offset(raising_inside_with, "raises"),
        stack=(Reenter(Recorder, (), (("name", "kw"),)), *call_slots(Const(raises), Value(0))),
        live=(("x", Value(0)),),
        helper_args=("x", "m"),
    )
    with pytest.raises(KeyError):
        new(3, Recorder("unused"))
    assert EVENTS == ["enter kw", "exit kw KeyError"]


def pair_note(a: int, b: int) -> int:
    c = a * 10
    return pair(c, note(c), b)


def test_a_stack_value_held_by_a_local_is_passed_once_under_the_locals_name() -> None:
    # ``c`` is on the stack twice (pending arguments of pair and note) and is the local c: the
    # resume function takes no ___stack argument for it and pushes its local instead.
    new = run_broken(
        pair_note,
        lambda a, b: (a * 10, b),
        offset=call_offset(pair_note, "note"),
        stack=(*call_slots(Const(pair), Local("c")), *call_slots(Const(note), Local("c"))),
        live=(("c", Value(0)), ("b", Value(1))),
        helper_args=("a", "b"),
    )
    assert new(2, 5) == pair_note(2, 5)
    assert EVENTS == [20, 20]
    resume = new.__globals__[next(n for n in new.__code__.co_names if "resume" in n)]
    assert isinstance(resume, types.FunctionType)
    params = resume.__code__.co_varnames[: resume.__code__.co_argcount]
    # pair and note's result are passed as ___stack<d>; c only once, as itself.
    assert len(params) == 4 and params[2:] == ("c", "b")


def with_inside_try(x: int, m: Recorder) -> int:
    try:
        with m:
            note(x)
    except KeyError:
        return -1
    return x


def with_outside_try(x: int, m: Recorder) -> int:
    with m:
        note(x)
    try:
        x = x + 1
    except KeyError:
        return -1
    return x


def make_manager_then_enter(x: int) -> int:
    with Recorder(str(x)):
        x = x + 1
    return x


def test_break_policy_sees_a_try_around_a_with_block_and_a_manager_being_made() -> None:
    inner = why_not_break_at(with_inside_try.__code__, call_offset(with_inside_try, "note"))
    assert inner is not None and "try" in inner
    outside = call_offset(with_outside_try, "note")
    assert why_not_break_at(with_outside_try.__code__, outside) is None
    instrs = instructions_at(make_manager_then_enter.__code__)
    enter = next(k for k, i in enumerate(instrs) if i.opname == "BEFORE_WITH")
    making_call = instrs[enter - 1].offset
    assert making_call is not None
    making = why_not_break_at(make_manager_then_enter.__code__, making_call)
    assert making is not None and "context manager" in making
    assert with_exit_slot(inside_with.__code__, call_offset(inside_with, "note")) == 0
    assert with_exit_slot(pair_note.__code__, call_offset(pair_note, "note")) is None


def nested_try_before_the_note(x: int) -> int:
    try:
        x = x * 2
        try:
            x = x + 1
        except KeyError:
            x = x - 1
    except ValueError:
        x = 0
    note(x)
    return x


def test_a_try_that_ended_before_the_break_does_not_stop_it() -> None:
    # On 3.12 the inner except clause is moved after the function's return, still covered by
    # the outer try's handler: only instructions up to the next return count.
    offset = call_offset(nested_try_before_the_note, "note")
    assert why_not_break_at(nested_try_before_the_note.__code__, offset) is None


def return_inside_with_inside_try(x: int, m: Recorder) -> int:
    try:
        with m:
            note(x)
            return x
    except KeyError:
        return -1


def test_a_try_around_a_with_whose_body_returns_still_stops_the_break() -> None:
    offset = call_offset(return_inside_with_inside_try, "note")
    why = why_not_break_at(return_inside_with_inside_try.__code__, offset)
    assert why is not None and "try" in why


def nested_withs(x: int, a: Recorder, b: Recorder) -> int:
    with a:
        with b:
            note(x)
    return x


def test_with_exit_slots_lists_every_active_with_block_innermost_first() -> None:
    offset = call_offset(nested_withs, "note")
    assert with_exit_slots(nested_withs.__code__, offset) == [1, 0]
    assert with_exit_slot(nested_withs.__code__, offset) == 1
    assert with_exit_slots(pair_note.__code__, call_offset(pair_note, "note")) == []
