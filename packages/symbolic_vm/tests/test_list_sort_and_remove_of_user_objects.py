"""``list.sort``/``sorted`` over keys that are user objects (their own ``__lt__``, traced: called
as often and in the same order as CPython's sort calls it), ``functools.cmp_to_key``, the list
seen empty by a key function while it sorts (and ValueError when one changes it), and
``list.remove`` comparing with a user ``__eq__``: each against eager on the same inputs.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from vm_harness import check

pytestmark = pytest.mark.usefixtures("errors_raise")

LOG: list[tuple[int, int]] = []


class _ModThree:
    def __init__(self, v: int) -> None:
        self.v = v

    def __lt__(self, other: _ModThree) -> bool:
        LOG.append((self.v, other.v))
        return self.v % 3 < other.v % 3


class _AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True


class _NeverEqual:
    def __eq__(self, other: object) -> bool:
        return False


def test_sorting_by_user_lt_keys_calls_lt_as_eager_does() -> None:
    def fn() -> Any:
        LOG.clear()
        p = [3, 4, 5, 9, 1, 7, 2, 8, 6]
        p.sort(key=_ModThree)  # stable: equal keys keep their order
        first = list(p)
        p.sort(key=_ModThree, reverse=True)
        return first, p, sorted([2, 5, 3], key=_ModThree), list(LOG)

    check(fn)


def test_cmp_to_key_sorts_as_eager() -> None:
    def fn() -> Any:
        def revcmp(a: int, b: int) -> int:
            return (a < b) - (a > b)

        p = [1, 3, 2]
        p.sort(key=functools.cmp_to_key(revcmp))
        first = list(p)
        p.sort(key=functools.cmp_to_key(revcmp), reverse=True)
        return first, p

    check(fn)


def test_a_list_is_empty_while_it_sorts_and_a_change_raises() -> None:
    def fn() -> Any:
        p = [1, 3, 2]
        sizes = []

        def key(x: int) -> int:
            sizes.append(len(p))
            return x

        p.sort(key=key)
        q = [1, 3, 2]

        def grow(x: int) -> int:
            q.append(4)
            return x

        try:
            q.sort(key=grow)
        except ValueError as exc:
            return p, sizes, q, str(exc)
        return None

    check(fn)


def test_list_remove_compares_with_the_items_own_eq() -> None:
    def fn() -> Any:
        p: list[Any] = [_AlwaysEqual()]
        p.remove(_NeverEqual())  # the item's __eq__ answers: True
        item = _NeverEqual()
        q = [item]
        q.remove(item)  # identity first
        try:
            [_NeverEqual()].remove(_NeverEqual())
        except ValueError as exc:
            return len(p), len(q), str(exc)
        return None

    check(fn)
