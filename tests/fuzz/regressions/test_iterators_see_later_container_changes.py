"""Fuzz finds of the iter_mutation family (session 12): the VM's builtin iterators are
snapshots, where CPython's read their container as they go.

``zip``/``enumerate``/``map``/``filter``/``reversed`` over a list and ``iter(d.values())`` took
their items when they were made, so a change of the container before they were consumed was not
seen; a list iterator advanced to the end of its list before a graph break crossed as an empty
iterator, so an append after the break was missed; an iterator over an argument's list returned
from the frame was rebuilt over the items of the moment. Fixed in symbolic_vm: such an iterator
remembers its containers' contents (``IterBox.watch``) and consuming it after a change that
CPython's would show is a graph break (``IterBox.stale``: a write to a list position already
passed does not count); an iterator is done only once found empty (``IterBox.done``), so one at
the end of a list still crosses a break as pending; one over a container leaving the frame is
Unsupported there.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api
from tests.fuzz.runner import compare


def zip_then_append(x: torch.Tensor, lst: list[float]) -> Any:
    z = zip(lst, range(9))
    lst.append(3.0)
    return x + 1, list(z)


def enumerate_then_append(x: torch.Tensor, lst: list[float]) -> Any:
    z = enumerate(lst)
    lst.append(3.0)
    return x + 1, list(z)


def map_then_write(x: torch.Tensor, lst: list[float]) -> Any:
    z = map(lambda v: v + 1, lst)
    lst[0] = 7.0
    return x + 1, list(z)


def filter_then_append(x: torch.Tensor, lst: list[float]) -> Any:
    z = filter(lambda v: v > -10, lst)
    lst.append(3.0)
    return x + 1, list(z)


def reversed_then_write(x: torch.Tensor, lst: list[float]) -> Any:
    z = reversed(lst)
    lst[0] = 7.0
    return x + 1, list(z)


def dict_values_then_write(x: torch.Tensor, lst: list[float]) -> Any:
    d = {"a": x, "b": x * 2}
    z = iter(d.values())
    next(z)
    d["b"] = x * 7
    return list(z)


def list_iterator_at_its_end_across_a_break(x: torch.Tensor, lst: list[float]) -> Any:
    items = [x, x * 2]
    it = iter(items)
    first, second = next(it), next(it)
    torch._dynamo.graph_break()
    items.append(x * 5.0)
    return first, second, next(it, None)


def returned_iterator(x: torch.Tensor, lst: list[float]) -> Any:
    return x + 1, iter(lst)


def set_grown_under_a_generator(x: torch.Tensor, lst: list[float]) -> Any:
    # seed 1202 program 175: eager's set iterator raises, the VM's snapshot went on
    s = {1, 2, len(lst)}
    gen = (v for v in s)
    first = next(gen)
    s.add(9)
    try:
        return x + first, tuple(gen)
    except RuntimeError as e:
        return x - first, str(e)


@pytest.mark.parametrize("fn", [
    zip_then_append, enumerate_then_append, map_then_write, filter_then_append,
    reversed_then_write, dict_values_then_write, list_iterator_at_its_end_across_a_break,
    returned_iterator, set_grown_under_a_generator,
])
def test_an_iterator_sees_its_container_change_before_it_is_consumed(
    fn: Callable[..., Any]
) -> None:
    compiled = compile_api.compile(fn, backend="eager")
    for values in ([1.0, 2.0], [0.5]):
        eager_lst, compiled_lst = copy.copy(values), copy.copy(values)
        x = torch.ones(2)
        eager, got = fn(x, eager_lst), compiled(x, compiled_lst)
        if fn is returned_iterator:  # the caller changes the list, then consumes
            eager_lst.append(9.0)
            compiled_lst.append(9.0)
            eager, got = list(eager[1]), list(got[1])
        assert compare((eager, eager_lst), (got, compiled_lst), exact=True) is None


LOG: list[object] = []


def logged_double(v: float) -> float:
    LOG.append(("f", v))
    return v * 2


def map_runs_its_function_per_item(x: torch.Tensor, lst: list[float]) -> Any:
    m = map(logged_double, lst)
    LOG.append("between")
    return x + 1, next(m)


def filter_runs_its_test_per_item(x: torch.Tensor, lst: list[float]) -> Any:
    m = filter(lambda v: LOG.append(("p", v)) or v > 0, lst)
    LOG.append("between")
    return x + 1, list(m)


def filter_over_a_set_changed_after(x: torch.Tensor, lst: list[float]) -> Any:
    # seed 1204 program 242: the lazy filter made its set iterator at the first next(), after
    # the discard, where eager's made it in filter() and raises
    s = {1, 2, len(lst) + 4}
    it = filter(lambda v: v > 1, s)
    s.discard(2)
    try:
        return x + 1, [next(it, None), next(it, None)]
    except RuntimeError as e:
        return x - 1, str(e)


@pytest.mark.parametrize("fn", [
    map_runs_its_function_per_item, filter_runs_its_test_per_item, filter_over_a_set_changed_after,
])
def test_map_and_filter_call_the_function_as_items_are_consumed(fn: Callable[..., Any]) -> None:
    # map/filter called the program's function on every item when they were made: effects out
    # of order and calls eager never makes (next(m) calls it once)
    compiled = compile_api.compile(fn, backend="eager")
    LOG.clear()
    eager = fn(torch.ones(2), [1.0, 2.0])
    eager_log = list(LOG)
    LOG.clear()
    got = compiled(torch.ones(2), [1.0, 2.0])
    assert compare((eager, eager_log), (got, LOG), exact=True) is None


def zip_leaves_the_rest_of_an_iterator(x: torch.Tensor, lst: list[float]) -> Any:
    it = iter(lst + [1.0, 2.0])
    pairs = list(zip(it, range(1)))
    return x + 1, pairs, list(it)


def enumerate_takes_one_item_of_an_iterator(x: torch.Tensor, lst: list[float]) -> Any:
    it = iter(lst + [1.0, 2.0])
    first = next(enumerate(it))
    return x + 1, first, next(map(float, it)), list(it)


@pytest.mark.parametrize(
    "fn", [zip_leaves_the_rest_of_an_iterator, enumerate_takes_one_item_of_an_iterator]
)
def test_builtins_over_an_iterator_take_its_items_one_at_a_time(fn: Callable[..., Any]) -> None:
    # zip/enumerate/map over an iterator took all its items when made (the rest of it empty)
    compiled = compile_api.compile(fn, backend="eager")
    x = torch.ones(2)
    assert compare(fn(x, [0.5]), compiled(x, [0.5]), exact=True) is None

