"""A list iterator reads its list at each step, as in Python: items appended while iterating
are yielded, and an exhausted iterator stays exhausted. The VM's iterator had copied the items
when it was made (``for v in lst: lst.append(...)`` gave 3 where eager gives 15)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api


def append_while_looping(x: torch.Tensor) -> torch.Tensor:
    lst = [1, 2]
    out = x
    for v in lst:
        if v < 4:
            lst.append(v + 2)
        out = out + v
    return out


def append_after_iter(x: torch.Tensor) -> list[torch.Tensor]:
    lst = [x, x + 1]
    it = iter(lst)
    lst.append(x * 3)
    return list(it)


def grow_after_exhausted(x: torch.Tensor) -> tuple[Any, ...]:
    lst = [x]
    it = iter(lst)
    first = list(it)
    lst.append(x + 1)
    return first, list(it)


def pop_while_looping(x: torch.Tensor) -> torch.Tensor:
    lst = [x, x + 1, x + 2, x + 3]
    out = x
    for t in lst:
        out = out * 2 + t
        lst.pop()
    return out


def next_after_the_end(x: torch.Tensor) -> tuple[Any, ...]:
    lst = [x]
    it = iter(lst)
    a = next(it)
    try:
        next(it)
    except StopIteration:
        pass
    lst.append(x * 5)
    return a, list(it)


def next_with_a_default_after_the_end(x: torch.Tensor) -> tuple[Any, ...]:
    lst = [x]
    it = iter(lst)
    a = next(it)
    b = next(it, x * 0)
    lst.append(x * 5)
    return a, b, list(it)


def same(got: Any, want: Any) -> None:
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w)
    else:
        assert isinstance(got, torch.Tensor)
        assert torch.equal(got, want)


@pytest.mark.parametrize("fn", [
    append_while_looping, append_after_iter, grow_after_exhausted, pop_while_looping,
    next_after_the_end, next_with_a_default_after_the_end,
])
def test_a_list_iterator_sees_the_list_change_as_in_eager(fn: Callable[..., Any]) -> None:
    x = torch.randn(3)
    compile_api.reset()
    same(compile_api.compile(fn, backend="eager")(x), fn(x))
    compile_api.reset()
