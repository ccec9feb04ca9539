"""A nan argument meets a list, dict or set: CPython finds it by identity (``x is y`` before
``==``, and nan != nan), so ``nan in [nan]`` is True for the same object only. The trace works
on the real objects and a nan from the frame is guarded by identity, so a call with another nan
object recompiles and every answer is eager's (was: the first call's answer reused, and
``v in [v]`` False)."""

from __future__ import annotations

from typing import Any

import torch

import compile_api


def _lookups(x: torch.Tensor, lst: list[Any], d: dict[Any, int], s: set[Any], v: Any) -> Any:
    return x + 1, v in lst, lst.count(v), v in d, d.get(v, -1), v in s, v is lst[0]


def test_a_nan_argument_is_found_by_identity_as_in_eager() -> None:
    compiled = compile_api.compile(_lookups, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    first, second = float("nan"), float("nan")
    for held, probe in [(first, first), (first, second), (second, first), (first, first)]:
        args = (x, [held], {held: 1}, {held, 2}, probe)
        got, expected = compiled(*args), _lookups(*args)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
