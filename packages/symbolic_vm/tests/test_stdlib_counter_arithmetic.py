"""``collections.Counter`` arithmetic and counting inside compiled code: ``+ - & |``, unary
``+``/``-``, ``+=``/``-=``/``|=``/``&=``, ``most_common``, ``update``/``subtract`` (with an
iterable, a mapping, keywords), on counters made in the frame and passed in (whose changes are
replayed). Counter's own Python methods are traced (object_operators dispatches the operators).
Each equals eager (results and arguments), is captured whole (``fullgraph=True``), in no more
graphs than torch.compile."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from stdlib_harness import check_whole

pytestmark = pytest.mark.usefixtures("errors_raise")


def _arithmetic(x: torch.Tensor) -> Any:
    a = collections.Counter(a=3, b=1, c=-2)
    b = collections.Counter({"a": 1, "b": 4, "d": 2})
    results = [a + b, a - b, a & b, a | b, +a, -a]
    return x * results[0]["a"], results, [sorted(r.items()) for r in results]


def test_counter_binary_and_unary_operators_match_eager_in_one_graph() -> None:
    runs = check_whole(_arithmetic, lambda: (torch.arange(3.0),))
    assert all(type(r) is collections.Counter for r in runs.ours[1])


def _in_place(x: torch.Tensor) -> Any:
    c = collections.Counter("aabbbc")
    same_c = c
    c += collections.Counter("ad")
    c -= collections.Counter(b=2)
    c |= collections.Counter(z=4)
    c &= collections.Counter(a=2, b=5, z=1)
    return x + c["a"], c, c is same_c, c.most_common(), c.most_common(1)


def test_counter_in_place_operators_change_the_counter_itself() -> None:
    runs = check_whole(_in_place, lambda: (torch.arange(3.0),))
    assert runs.ours[2] is True


def _update_subtract(x: torch.Tensor, outside: collections.Counter[str]) -> Any:
    c = collections.Counter()
    c.update("hello")
    c.update({"h": 2, "q": 1})
    c.update(w=3)
    c.subtract("ll")
    c.subtract({"w": 5})
    c.subtract(q=1)
    outside.update(["a", "a"])
    outside.subtract(b=1)
    return x * c["l"], c, sorted(c.elements()), c.most_common(2), outside.most_common()


def test_counter_update_and_subtract_on_made_and_passed_in_counters_match_eager() -> None:
    check_whole(_update_subtract, lambda: (torch.arange(3.0), collections.Counter("abb")))


def _compare_counters(x: torch.Tensor) -> Any:
    a, b = collections.Counter("aab"), collections.Counter("aabc")
    return x * (a <= b), a == b, a < b, b >= a, a != collections.Counter(a=2, b=1)


def test_counter_comparisons_match_eager() -> None:
    check_whole(_compare_counters, lambda: (torch.arange(3.0),))
