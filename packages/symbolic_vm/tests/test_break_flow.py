"""The control-flow analysis graph breaks ask (symbolic_vm.breaks.flow): made once per code
object, released with it, and one answer to "inside a loop or a try block?". Plain values, no
torch (runs with ``--noconftest`` on every supported CPython)."""

from __future__ import annotations

import contextlib
import gc
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from symbolic_vm.breaks.flow import (
    flow_of,
    in_loop_or_try,
    why_not_break_at,
    with_exit_slots,
    with_slots,
)
from symbolic_vm.breaks.resume import instructions_at


def note(value: object) -> None:
    """Where the graph would break."""


@contextlib.contextmanager
def manager() -> Iterator[None]:
    yield


def note_offset(fn: Callable[..., Any]) -> int:
    for ins in instructions_at(fn.__code__):
        if ins.opname == "LOAD_GLOBAL" and ins.arg == "note":
            assert ins.offset is not None
            return ins.offset
    raise AssertionError("no call of note")


def plain(x: int) -> int:
    note(x)
    return x + 1


def in_a_loop(xs: list[int]) -> int:
    total = 0
    for x in xs:
        note(x)
        total += x
    return total


def returning_from_a_loop(xs: list[int]) -> int | None:
    for x in xs:
        note(x)
        if x:
            return x
    return None


def in_a_try(x: int) -> int:
    try:
        note(x)
    except ValueError:
        return 0
    return x


def try_inside_with(x: int) -> int:
    with manager():
        try:
            note(x)
        finally:
            x += 1
    return x


def nested_withs(x: int) -> int:
    with manager(), manager():
        note(x)
    return x


def test_the_analysis_is_made_once_per_code_object_and_released_with_it() -> None:
    source = "def f(xs):\n    for x in xs:\n        note(x)\n    return xs\n"
    namespace: dict[str, Any] = {"note": note}
    exec(compile(source, "<flow test>", "exec"), namespace)
    code = namespace["f"].__code__
    first = flow_of(code)
    assert flow_of(code) is first
    offset = note_offset(namespace["f"])
    assert in_loop_or_try(code, offset)
    alive = weakref.ref(first)
    del first, code, namespace
    gc.collect()
    assert alive() is None


def test_a_plain_statement_is_in_no_loop_try_or_with_block() -> None:
    offset = note_offset(plain)
    assert not in_loop_or_try(plain.__code__, offset)
    assert why_not_break_at(plain.__code__, offset) is None
    assert with_slots(plain.__code__, offset) == []


def test_loops_and_try_blocks_are_found_by_the_one_question() -> None:
    for fn in (in_a_loop, in_a_try):
        offset = note_offset(fn)
        assert in_loop_or_try(fn.__code__, offset), fn.__name__
        # The break policy TorchDynamo follows names the loop or try block.
        why = why_not_break_at(fn.__code__, offset)
        assert why is not None and ("loop" in why or "try" in why), fn.__name__


def test_a_loop_whose_back_edge_follows_a_return_is_still_a_loop() -> None:
    # On 3.11 the return inside the loop comes before the back edge in code order, so the
    # code-order scan alone (TorchDynamo's reading) misses the loop; the flow's back edges see it.
    offset = note_offset(returning_from_a_loop)
    assert in_loop_or_try(returning_from_a_loop.__code__, offset)


def test_with_blocks_are_listed_innermost_first_and_up_to_a_try_block() -> None:
    offset = note_offset(nested_withs)
    assert with_slots(nested_withs.__code__, offset) == [1, 0]
    assert with_exit_slots(nested_withs.__code__, offset) == [1, 0]
    offset = note_offset(try_inside_with)
    # The try block's handler comes first: the with block around it is found through it,
    # and the policy's own list stops at the try.
    assert with_slots(try_inside_with.__code__, offset) == [0]
    assert with_exit_slots(try_inside_with.__code__, offset) == []
    assert in_loop_or_try(try_inside_with.__code__, offset)


def test_equal_code_objects_share_one_analysis() -> None:
    make = "def g(x):\n    note(x)\n    return x\n"
    first: dict[str, Any] = {"note": note}
    second: dict[str, Any] = {"note": note}
    exec(compile(make, "<same>", "exec"), first)
    exec(compile(make, "<same>", "exec"), second)
    a, b = first["g"].__code__, second["g"].__code__
    assert isinstance(a, types.CodeType) and a == b
    assert flow_of(a) is flow_of(b)
