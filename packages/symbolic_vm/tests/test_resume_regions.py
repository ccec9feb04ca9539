"""Region-level breaks on plain Python values (no torch): a loop or try statement of a frame
runs as its own bytecode between a prologue helper and resume functions (symbolic_vm.breaks.region).

Each case builds the residual code for the region around a call of ``note`` the way the VM
would (the helper returns the frame's locals at the region's start), runs it and the original
on the same arguments, and compares results and the calls ``note`` saw. Runs on every CPython
the bytecode toolkit supports:

    PYTHONPATH=packages/symbolic_vm/src <python3.12> -m pytest --noconftest -p no:cacheprovider \
        packages/symbolic_vm/tests/test_resume_regions.py
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any

import pytest

from symbolic_vm.breaks.flow import in_loop_or_try, with_slots
from symbolic_vm.breaks.region import find_region, region_residual
from symbolic_vm.breaks.resume import (
    UNBOUND,
    BreakPlan,
    Const,
    Handoff,
    Null,
    Reenter,
    ResumeBuilder,
    Value,
    instructions_at,
    positional_helper,
)
from symbolic_vm.bytecode import PY_VERSION, ResumeError

SEEN: list[object] = []


def note(value: object) -> None:
    SEEN.append(value)


def note_offset(fn: Callable[..., Any]) -> int:
    for ins in instructions_at(fn.__code__):
        if ins.opname == "LOAD_GLOBAL" and ins.arg == "note":
            assert ins.offset is not None
            return ins.offset
    raise AssertionError("no call of note")


def run_region(
    fn: Callable[..., Any], helper: Callable[..., Any], names: tuple[str, ...], *args: Any
) -> tuple[object, list[object], ResumeBuilder]:
    """Run ``fn``'s residual code for the region around ``note`` (its statement when it is in
    no loop or try); the helper computes the locals ``names`` at the region's start. Returns
    the result and what ``note`` saw."""
    assert isinstance(fn, types.FunctionType)
    region = find_region(fn.__code__, note_offset(fn), statement=True)
    counter = itertools.count(1)
    builder = ResumeBuilder(lambda: next(counter))
    flat, _ = positional_helper(helper.__code__)
    plan = BreakPlan(
        fn.__code__, region.start, (), tuple((n, Value(k)) for k, n in enumerate(names)),
        helper="", helper_code=flat,
    )
    built = region_residual(builder, plan, region)
    g = dict(fn.__globals__)
    g.update(built.globals_to_install(g))
    residual = types.FunctionType(built.code, g, fn.__name__, fn.__defaults__, fn.__closure__)
    SEEN.clear()
    out = residual(*args)
    return out, list(SEEN), builder


def same_as_eager(
    fn: Callable[..., Any], helper: Callable[..., Any], names: tuple[str, ...], *args: Any
) -> ResumeBuilder:
    SEEN.clear()
    expected = fn(*args)
    eager_seen = list(SEEN)
    out, seen, builder = run_region(fn, helper, names, *args)
    assert out == expected
    assert seen == eager_seen
    return builder


def for_range(x: int, n: int) -> int:
    y = x * 2
    for i in range(n):
        y = y + i
        note(i)
        t = y * i
    return y + t


def for_range_helper(x: int, n: int) -> tuple[int, int, int]:
    return (x, n, x * 2)


@pytest.mark.parametrize("n", [1, 3])
def test_a_for_loop_region_runs_its_bytecode_and_resumes_after_it(n: int) -> None:
    same_as_eager(for_range, for_range_helper, ("x", "n", "y"), 5, n)


def loop_var_after(x: int, n: int) -> int:
    y = x * 2
    for i in range(n):
        note(i)
    if n > 0:
        y = y + i
    return y


def test_a_loop_variable_left_unbound_is_deleted_again_in_the_resume_function() -> None:
    builder = same_as_eager(loop_var_after, for_range_helper, ("x", "n", "y"), 5, 0)
    same_as_eager(loop_var_after, for_range_helper, ("x", "n", "y"), 5, 2)
    assert len(builder) == 1
    assert repr(UNBOUND) == "<unbound local>"


def while_break_continue(x: int, xs: list[int]) -> int:
    y = x * 2
    k = 0
    while k < len(xs):
        v = xs[k]
        k += 1
        if v < 0:
            continue
        if v > 10:
            break
        note(v)
        y += v
    return y


def while_helper(x: int, xs: list[int]) -> tuple[int, list[int], int, int]:
    return (x, xs, x * 2, 0)


def test_a_while_loop_with_break_and_continue_runs_as_one_region() -> None:
    same_as_eager(while_break_continue, while_helper, ("x", "xs", "y", "k"), 1,
                  [1, -2, 3, 20, 4])


def nested_with_return(x: int, xs: list[int]) -> int:
    y = x * 2
    for a in xs:
        for b in xs:
            note((a, b))
            if a * b > 5:
                return y + a * b
        y += a
    return -y


def nested_helper(x: int, xs: list[int]) -> tuple[int, list[int], int]:
    return (x, xs, x * 2)


@pytest.mark.parametrize("xs", [[1, 2], [1, 2, 3]])
def test_nested_loops_with_a_return_inside_the_region(xs: list[int]) -> None:
    same_as_eager(nested_with_return, nested_helper, ("x", "xs", "y"), 1, xs)


def try_except(x: int, raise_it: bool) -> int:
    y = x * 2
    try:
        y += 1
        note("try")
        if raise_it:
            raise ValueError("boom")
    except ValueError as e:
        note(str(e))
        y *= 3
    finally:
        note("finally")
    return y + 1


def try_helper(x: int, raise_it: bool) -> tuple[int, bool, int]:
    return (x, raise_it, x * 2)


@pytest.mark.parametrize("raise_it", [False, True])
def test_a_try_statement_region_with_and_without_an_exception(raise_it: bool) -> None:
    same_as_eager(try_except, try_helper, ("x", "raise_it", "y"), 4, raise_it)


def escapes(x: int) -> int:
    y = x * 2
    try:
        note("try")
        raise KeyError(y)
    finally:
        note("finally")


def test_an_exception_escaping_the_region_escapes_the_residual_frame() -> None:
    with pytest.raises(KeyError):
        run_region(escapes, lambda x: (x, x * 2), ("x", "y"), 3)
    assert SEEN == ["try", "finally"]


def comprehension_and_generator_in_loop(x: int, xs: list[int]) -> int:
    total = x
    for i in range(2):
        total += sum(v * i for v in xs) + len([v for v in xs if v > i])
        note(total)
    return total


def test_comprehensions_and_generators_inside_a_region() -> None:
    same_as_eager(comprehension_and_generator_in_loop, lambda x, xs: (x, xs, x),
                  ("x", "xs", "total"), 1, [1, 2, 3])


def not_in_a_loop(x: int) -> int:
    note(x)
    return x


def test_a_break_outside_any_loop_or_try_has_no_region() -> None:
    assert not in_loop_or_try(not_in_a_loop.__code__, note_offset(not_in_a_loop))
    with pytest.raises(ResumeError):
        find_region(not_in_a_loop.__code__, note_offset(not_in_a_loop))


def test_the_region_is_the_outermost_statement_and_starts_at_the_loop_statement() -> None:
    region = find_region(nested_with_return.__code__, note_offset(nested_with_return))
    first_line = nested_with_return.__code__.co_firstlineno
    assert region.lines[0] == first_line + 2  # `for a in xs:`
    assert region.kind == "loop"
    starts = [i for i in instructions_at(nested_with_return.__code__) if i.offset == region.start]
    assert starts[0].opname == "LOAD_FAST" and starts[0].arg == "xs"


def comprehension_statement(x: int, xs: list[int]) -> int:
    y = x * 2
    total = sum([note(v) or v * y for v in xs]) + y
    return total + 1


@pytest.mark.skipif(PY_VERSION < (3, 12), reason="comprehensions are inlined from 3.12 (PEP 709)")
def test_a_break_in_an_inlined_comprehension_runs_its_whole_statement() -> None:
    region = find_region(comprehension_statement.__code__, note_offset(comprehension_statement))
    starts = [i for i in instructions_at(comprehension_statement.__code__)
              if i.offset == region.start]
    assert starts[0].opname == "LOAD_GLOBAL" and starts[0].arg == "sum"  # the statement's start
    same_as_eager(comprehension_statement, lambda x, xs: (x, xs, x * 2), ("x", "xs", "y"),
                  3, [1, 2, 3])


def for_else_while_true(x: int, xs: list[int]) -> int:
    y = x
    for v in xs:
        note(v)
        if v < 0:
            break
        y += v
    else:
        y *= 10
    k = 0
    while True:
        k += 1
        if k > 2:
            break
    return y + k


def for_else_helper(x: int, xs: list[int]) -> tuple[int, list[int], int]:
    return (x, xs, x)


@pytest.mark.parametrize("xs", [[1, 2], [1, -1, 2], []])
def test_for_else_and_a_while_true_after_the_region(xs: list[int]) -> None:
    same_as_eager(for_else_while_true, for_else_helper, ("x", "xs", "y"), 1, xs)


def loop_holding_a_raising_try(x: int, xs: list[int]) -> int:
    y = x
    for v in xs:
        try:
            y += v
            raise ValueError(v)
        except ValueError:
            y *= 2
        note(y)  # reached only through the except clause: 3.12+ put it after the return
    z = y + 1
    return z


@pytest.mark.parametrize("xs", [[], [1], [1, 2, 3]])
def test_a_loop_closed_after_an_out_of_line_except_clause_is_one_region(xs: list[int]) -> None:
    code = loop_holding_a_raising_try.__code__
    region = find_region(code, note_offset(loop_holding_a_raising_try))
    assert region.kind == "loop and try block"
    assert region.lines[0] == code.co_firstlineno + 2  # `for v in xs:`
    assert len(region.exits) == 1  # after the loop: `z = y + 1` compiles again
    same_as_eager(loop_holding_a_raising_try, for_else_helper, ("x", "xs", "y"), 1, xs)


def stored_by_a_pair(x: int) -> int:
    y = x * 2; y.__add__(note(y))  # noqa: E702 - 3.13: STORE_FAST_LOAD_FAST (y, y) in the region
    return y + 1


def test_a_local_a_region_stores_through_a_313_pair_reaches_the_resume_function() -> None:
    # Before: the region's stores missed 3.13's pair instructions, the resume function did not
    # get y and read it unbound with LOAD_FAST (a segfault on 3.13).
    if PY_VERSION >= (3, 13):  # the store is a pair: the statement starts before it
        builder = same_as_eager(stored_by_a_pair, lambda x: (x,), ("x",), 3)
    else:  # a plain STORE_FAST ends the first statement: the region starts after it
        builder = same_as_eager(stored_by_a_pair, lambda x: (x, x * 2), ("x", "y"), 3)
    assert len(builder) == 1


class Recorder:
    def __enter__(self) -> Recorder:
        SEEN.append("enter")
        return self

    def __exit__(self, *exc: object) -> None:
        SEEN.append("exit")


def with_inside_and_finally_return(x: int, xs: list[int]) -> int:
    y = x
    try:
        for v in xs:
            with Recorder():
                note(v)
                if v == 0:
                    raise ValueError(v)
                y += v
    except ValueError:
        y = -y
    else:
        y += 100
    finally:
        note("finally")
    return y


@pytest.mark.parametrize("xs", [[1, 2], [1, 0, 2]])
def test_with_blocks_inside_a_region_and_try_except_else_finally(xs: list[int]) -> None:
    same_as_eager(with_inside_and_finally_return, for_else_helper, ("x", "xs", "y"), 1, xs)


def region_inside_with(x: int, xs: list[int]) -> int:
    y = x
    with Recorder():
        for v in xs:
            note(v)
            if v > 5:
                return y
            y += v
        y *= 2
    return y


@pytest.mark.parametrize("xs", [[1, 2], [1, 7, 2]])
def test_a_region_inside_a_with_block_reenters_it_and_exits_it_once_per_side(
    xs: list[int],
) -> None:
    region = find_region(region_inside_with.__code__, note_offset(region_inside_with))
    assert region.base == 1  # the with block's __exit__ stays on the stack
    counter = itertools.count(1)
    builder = ResumeBuilder(lambda: next(counter))
    flat, _ = positional_helper(for_else_helper.__code__)
    plan = BreakPlan(
        region_inside_with.__code__, region.start, (Reenter(Recorder),),
        (("x", Value(0)), ("xs", Value(1)), ("y", Value(2))), helper="", helper_code=flat,
    )
    built = region_residual(builder, plan, region)
    g = dict(region_inside_with.__globals__)
    g.update(built.globals_to_install(g))
    SEEN.clear()
    expected = region_inside_with(1, xs)
    eager_seen = list(SEEN)
    SEEN.clear()
    out = types.FunctionType(built.code, g)(1, xs)
    assert out == expected
    # The residual code enters a fresh manager for the region and exits it at the region's
    # exit; the resume function enters another one for the rest of the block. A return inside
    # the region exits the residual's manager itself.
    assert [s for s in SEEN if s not in ("enter", "exit")] == [
        s for s in eager_seen if s not in ("enter", "exit")
    ]
    assert SEEN[0] == "enter" and SEEN[-1] == "exit"
    assert SEEN.count("enter") == SEEN.count("exit") == (1 if 7 in xs else 2)


class Box:
    pass


def statement_with_a_conditional(x: int, box: Box) -> int:
    y = x * 2
    box.seen = [note(v) or v for v in (y, y + 1)] if y > 0 else note("no")  # type: ignore[attr-defined]
    del box.seen  # type: ignore[attr-defined]
    return y + 1


def test_a_statement_region_runs_one_statement_and_resumes_after_it() -> None:
    fn = statement_with_a_conditional
    region = find_region(fn.__code__, note_offset(fn), statement=True)
    # 3.12+ inlines the comprehension: a loop inside the statement, which is then the region.
    assert region.kind == ("statement" if PY_VERSION < (3, 12) else "loop")
    line = fn.__code__.co_firstlineno + 2
    assert region.lines == (line, line)
    assert len(region.exits) == 1  # the next statement (`del box.seen`)
    for x in (3, -3):
        same_as_eager(fn, lambda x, box: (x, box, x * 2), ("x", "box", "y"), x, Box())


# --- user with statements as regions ------------------------------------------------------------


class Suppressing:
    """A user context manager noting its calls and the exception ``__exit__`` saw; it suppresses
    the exception when ``suppress``."""

    def __init__(self, suppress: bool) -> None:
        self.suppress = suppress

    def __enter__(self) -> Suppressing:
        note("enter")
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        note(("exit", kind.__name__ if kind else None))
        return self.suppress


def user_with(x: int, mode: str) -> int:
    y = x * 2
    with Suppressing(mode == "suppress") as m:
        note(m.suppress)
        if mode != "none":
            raise ValueError(y)
        y += 1
    return y + 1


def user_with_helper(x: int, mode: str) -> tuple[int, str, int]:
    return (x, mode, x * 2)


def with_region(fn: Callable[..., Any]) -> Any:
    """The region of the with statements around ``fn``'s first call of ``note`` (every one a
    user manager)."""
    offset = note_offset(fn)
    return find_region(fn.__code__, offset, withs=frozenset(with_slots(fn.__code__, offset)))


def run_with_region(
    fn: Callable[..., Any], helper: Callable[..., Any], names: tuple[str, ...], *args: Any
) -> tuple[tuple[str, object], list[object], tuple[str, object], list[object]]:
    """Eager's and the residual code's outcome (a value or the exception raised) and notes."""
    assert isinstance(fn, types.FunctionType)
    region = with_region(fn)
    counter = itertools.count(1)
    flat, _ = positional_helper(helper.__code__)
    plan = BreakPlan(
        fn.__code__, region.start, (), tuple((n, Value(k)) for k, n in enumerate(names)),
        helper="", helper_code=flat,
    )
    built = region_residual(ResumeBuilder(lambda: next(counter)), plan, region)
    g = dict(fn.__globals__)
    g.update(built.globals_to_install(g))
    residual = types.FunctionType(built.code, g, fn.__name__)

    def outcome(f: Callable[..., Any]) -> tuple[tuple[str, object], list[object]]:
        SEEN.clear()
        try:
            result: tuple[str, object] = ("value", f(*args))
        except ValueError as exc:
            result = ("raised", exc.args)
        return result, list(SEEN)

    return (*outcome(fn), *outcome(residual))


@pytest.mark.parametrize("mode", ["none", "raise", "suppress"])
def test_a_user_with_statement_region_enters_and_exits_its_manager_once(mode: str) -> None:
    region = with_region(user_with)
    assert region.kind == "with block"
    assert region.base == 0
    # 3.11: the normal and the suppressed path meet after the block (one exit); 3.12+ copies
    # the small return block onto the suppressed path (two exits).
    assert len(region.exits) == (1 if PY_VERSION < (3, 12) else 2)
    first = user_with.__code__.co_firstlineno
    assert region.lines == (first + 2, first + 6)
    expected, eager_seen, got, seen = run_with_region(
        user_with, user_with_helper, ("x", "mode", "y"), 3, mode
    )
    assert got == expected
    assert seen == eager_seen
    assert [s for s in seen if isinstance(s, tuple)] == [
        ("exit", None if mode == "none" else "ValueError")
    ]


def user_with_in_loop_around_loop(x: int, xs: list[int]) -> int:
    y = x
    for v in xs:
        with Suppressing(v == 2):
            with Suppressing(False):
                note(v)
                for w in range(v):
                    y += w
                if v == 2:
                    raise ValueError(v)
    return y


def test_nested_user_withs_around_a_loop_inside_a_loop_run_as_one_region() -> None:
    region = with_region(user_with_in_loop_around_loop)
    assert region.kind == "loop and with block"
    expected, eager_seen, got, seen = run_with_region(
        user_with_in_loop_around_loop, for_else_helper, ("x", "xs", "y"), 1, [1, 2, 3]
    )
    assert got == expected
    assert seen == eager_seen
    assert seen.count("enter") == 6


def user_with_around_try(x: int, fail: bool) -> int:
    y = x
    with Suppressing(False):
        try:
            note(y)
            if fail:
                raise ValueError(y)
        finally:
            y += 10
        y += 1
    return y


@pytest.mark.parametrize("fail", [False, True])
def test_a_try_inside_a_user_with_makes_the_with_statement_the_region(fail: bool) -> None:
    fn = user_with_around_try
    region = with_region(fn)
    assert region.kind == "try block and with block"
    expected, eager_seen, got, seen = run_with_region(
        fn, lambda x, fail: (x, fail, x), ("x", "fail", "y"), 1, fail
    )
    assert got == expected
    assert seen == eager_seen


# --- a user manager handed on to the resume function (resume.Handoff) ---------------------------


class Once:
    """A user context manager noting its calls and the exception its ``__exit__`` saw."""

    def __enter__(self) -> Once:
        note("enter")
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        note(("exit", kind.__name__ if kind else None))


def fail_if(kind: type[Exception] | None) -> None:
    if kind is not None:
        raise kind("boom")


def handed_on(x: int, kind: type[Exception] | None, later: bool) -> int:
    with Once():
        y = x * 2
        fail_if(None if later else kind)
        y = y + 1
        fail_if(kind if later else None)
    return y


@pytest.mark.parametrize(("kind", "later"), [(None, False), (KeyError, False), (KeyError, True)])
def test_a_handed_on_manager_is_entered_once_and_exited_once(
    kind: type[Exception] | None, later: bool
) -> None:
    # The helper stands for the graph: it made the manager and replayed its __enter__.
    def prologue(x: int, kind: type[Exception] | None, later: bool) -> tuple[object, ...]:
        manager = Once()
        manager.__enter__()
        return (manager, x * 2, x, kind, later, None if later else kind)

    fn = handed_on
    call = next(
        i.offset for i in instructions_at(fn.__code__) if i.opname in ("PRECALL", "CALL")
        and i.offset is not None and i.offset > note_offset_of(fn, "fail_if")
    )
    null_first = PY_VERSION < (3, 13)
    callee = (Const(fail_if),)
    stack = (Handoff(0), *((Null(), *callee) if null_first else (*callee, Null())), Value(5))
    counter = itertools.count(1)
    plan = BreakPlan(
        fn.__code__, call, stack,
        (("x", Value(2)), ("kind", Value(3)), ("later", Value(4)), ("y", Value(1))),
        helper="__prologue", helper_args=("x", "kind", "later"),
    )
    built = ResumeBuilder(lambda: next(counter)).residual(plan)
    g = {**fn.__globals__, "__prologue": prologue}
    g.update(built.globals_to_install(g))
    residual = types.FunctionType(built.code, g)

    def outcome(f: Callable[..., Any]) -> tuple[object, list[object]]:
        SEEN.clear()
        try:
            result: object = f(3, kind, later)
        except KeyError as exc:
            result = exc.args
        return result, list(SEEN)

    (expected, eager_seen), (got, seen) = outcome(fn), outcome(residual)
    assert got == expected
    assert seen == eager_seen
    assert seen[0] == "enter" and len(seen) == 2


def note_offset_of(fn: Callable[..., Any], name: str) -> int:
    for ins in instructions_at(fn.__code__):
        if ins.opname == "LOAD_GLOBAL" and ins.arg == name and ins.offset is not None:
            return ins.offset
    raise AssertionError(f"no load of {name}")


# --- an iterator held in a local: every statement using it is the region ------------------------


def iterator_local(x: int, xs: list[int]) -> int:
    y = x * 2
    it = iter(xs)
    a = next(it)
    note(a)
    b = next(it, -1)
    z = y + a + b
    return z * 3


def test_a_region_covering_an_iterators_uses_resumes_after_the_last_one() -> None:
    fn = iterator_local
    offset = note_offset(fn)
    region = find_region(fn.__code__, offset, cover=frozenset({"it"}))
    assert region.kind == "statements"
    first = fn.__code__.co_firstlineno
    assert region.lines == (first + 2, first + 5)  # `it = iter(xs)` .. `b = next(it, -1)`
    assert len(region.exits) == 1
    counter = itertools.count(1)
    flat, _ = positional_helper((lambda x, xs: (x, xs, x * 2)).__code__)
    plan = BreakPlan(
        fn.__code__, region.start, (), (("x", Value(0)), ("xs", Value(1)), ("y", Value(2))),
        helper="", helper_code=flat,
    )
    built = region_residual(ResumeBuilder(lambda: next(counter)), plan, region)
    g = dict(fn.__globals__)
    g.update(built.globals_to_install(g))
    residual = types.FunctionType(built.code, g)
    for xs in ([5, 6, 7], [5]):
        SEEN.clear()
        expected = fn(1, xs)
        eager_seen = list(SEEN)
        SEEN.clear()
        assert residual(1, xs) == expected
        assert SEEN == eager_seen == [5]
