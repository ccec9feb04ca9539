"""Fuzz finds of the iter_mutation and star_calls families (session 12, seed 1201 program 30
and the CI seed's programs 45 and 120): wrong results with or without a graph break.

1. ``lst[0] = v`` (item writes, ``del lst[k]``, ``d[k] = v``) on a list or dict from the frame
   was replayed as ``lst[:] = [v, lst[1]]`` guarded by the type alone: a call with a longer list
   truncated it, a shorter one raised IndexError, a dict with the keys in another order came
   back reordered. ``operations.note_mutation`` now guards what the write-back reads (the
   length, the keys in order), as the list methods did.
2. A graph break inside a display after an unpacking (``{**kw, 'p': print(), 'q': x}``,
   ``[*a, print(), x]``, ``{*s, print() or 3}``) lost every item after the break: the resume
   function got the half-built container as an input and its LIST_APPEND/MAP_ADD/SET_ADD/...
   never marked it changed, so it was returned as it came in. Those handlers now note the
   mutation like any other.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api


def write_first(x: torch.Tensor, lst: list[float]) -> torch.Tensor:
    lst[0] = 9.0
    return x + 1


def write_last(x: torch.Tensor, lst: list[float]) -> torch.Tensor:
    lst[-1] = 9.0
    return x + 1


def delete_first(x: torch.Tensor, lst: list[float]) -> torch.Tensor:
    del lst[0]
    return x + len(lst)


def write_key(x: torch.Tensor, d: dict[str, float]) -> torch.Tensor:
    d["a"] = 9.0
    return x + 1


LISTS = ([1.0, 2.0], [0.5], [1.0, 2.0, 3.0])
DICTS = ({"a": 1.0, "b": 2.0}, {"a": 1.0}, {"b": 1.0, "a": 2.0})


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [(write_first, LISTS), (write_last, LISTS), (delete_first, LISTS), (write_key, DICTS)],
)
def test_an_item_write_on_an_input_container_of_another_size_matches_eager(
    fn: Callable[..., Any], inputs: tuple[Any, ...]
) -> None:
    compiled = compile_api.compile(fn, backend="eager")
    for container in inputs:
        eager_arg, compiled_arg = copy.copy(container), copy.copy(container)
        x = torch.ones(2)
        assert torch.equal(compiled(x, compiled_arg), fn(x, eager_arg))
        assert compiled_arg == eager_arg
        assert list(compiled_arg) == list(eager_arg)  # dict keys in eager's order


def dict_display(x: torch.Tensor) -> Any:
    kw = {"scale": 2.0}
    return {**kw, "p": print("in dict"), "q": x}


def dict_display_first(x: torch.Tensor) -> Any:
    kw = {"scale": 2.0}
    return {"a": 1, **kw, "p": print("in dict"), "q": x * 2}


def list_display(x: torch.Tensor) -> Any:
    a = [x, 1]
    return [*a, print("in list"), x + 1]


def tuple_display(x: torch.Tensor) -> Any:
    a = [x, 1]
    return (*a, print("in tuple"), x + 1)


def set_display(x: torch.Tensor) -> Any:
    return x + 1, {*[1, 2], print("in set") or 3, 4}


@pytest.mark.parametrize(
    "fn", [dict_display, dict_display_first, list_display, tuple_display, set_display]
)
def test_a_break_inside_a_display_after_an_unpacking_keeps_the_later_items(
    fn: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.ones(2)
    eager = fn(x)
    compiled = compile_api.compile(fn, backend="eager")
    for _ in range(2):
        got = compiled(x)
        assert repr(got) == repr(eager)


def st_f(a: Any, b: Any = 1.0, *rest: Any, scale: float = 1.0, **kw: Any) -> Any:
    return a * scale + b + len(rest) + sum(kw.values(), 0.0)


def star_call_after_a_break(x: torch.Tensor) -> Any:
    a, kw = [x, x * 2], {"scale": 2.0}
    print("brk")
    kw["extra"] = 1.5  # the call sees the change
    return st_f(*a, **kw), st_f(x, *a, late=3.0, **kw, later=x), (*a, x + 1), {**kw, "q": x}


def star_call_in_a_loop_region(x: torch.Tensor) -> Any:
    out = []
    for k in range(2):
        a, kw = (x, x * k), {"scale": float(k)}
        print("brk", k)
        out.append(st_f(*a, **kw))
        out.append([*a, x * 3, *out[:1]])
    return out


@pytest.mark.parametrize("fn", [star_call_after_a_break, star_call_in_a_loop_region])
def test_star_and_double_star_calls_and_displays_after_a_break_match_eager(
    fn: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.ones(2)
    compiled = compile_api.compile(fn, backend="eager")
    assert repr(compiled(x)) == repr(fn(x))
