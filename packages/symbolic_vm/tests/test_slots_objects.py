"""Instances of ``__slots__`` classes made inside compiled code: stores and reads of their
members, an unset member's AttributeError, a name outside the slots refused with eager's
AttributeError, ``del`` of a member, and the object returned (rebuilt through its slot
descriptors). Compared with eager and with torch.compile's graph count."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same

pytestmark = pytest.mark.usefixtures("errors_raise")


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any) -> None:
        self.a = a


class WithDict(Slotted):
    """A subclass without __slots__: a __dict__ beside the parent's slots."""


def _slots(x: torch.Tensor) -> Any:
    s = Slotted(x + 1)
    had_b = hasattr(s, "b")
    try:
        s.b
    except AttributeError as error:
        unset = str(error)
    s.b = x * 2
    try:
        s.c = 1  # type: ignore[attr-defined]
    except AttributeError as error:
        outside = str(error)
    w = WithDict(x)
    w.extra = 5  # type: ignore[attr-defined]
    del s.a
    return s.b + w.a, had_b, hasattr(s, "b"), hasattr(s, "a"), unset, outside, w.extra, s, w


def test_slots_members_are_stored_read_and_deleted_as_in_eager() -> None:
    runs = run_three_ways(_slots, lambda: (torch.arange(3.0),))
    same(runs.ours[:7], runs.eager[:7])
    s, w = runs.ours[7:]
    assert type(s) is Slotted and not hasattr(s, "a")
    torch.testing.assert_close(s.b, runs.eager[7].b)
    assert type(w) is WithDict and w.extra == 5 and vars(w) == {"extra": 5}
    assert runs.our_graphs == 1 and runs.our_graphs <= max(runs.their_graphs, 1)
