"""A set argument holding functions, nan or complex numbers, as PyTorch's
test_sets::TestSetGuards passes them: traced as a set and guarded element by element (a
constant by value, a function or a nan by identity, in iteration order), so a set that changed
recompiles and every call gives eager's result. Frame counts are compared with torch.compile's
(torch 2.13's behaviour is the reference)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch._dynamo

import compile_api

from .conftest import TORCH_2_13, GraphCounter


def _branch_on_a_function(x: torch.Tensor, s: set[Any]) -> torch.Tensor:
    if torch.amp._exit_autocast in s:
        return x.sin()
    return x.cos()


def _branch_on_a_string(x: torch.Tensor, s: set[Any]) -> torch.Tensor:
    if "PyTorch" in s:
        return x.sin()
    return x.cos()


def _functions() -> set[Any]:
    return {torch._C._set_grad_enabled, torch.amp._enter_autocast, torch.amp._exit_autocast}


def _without_exit(s: set[Any]) -> None:
    s.remove(torch.amp._exit_autocast)


def _exit_swapped(s: set[Any]) -> None:
    s.remove(torch.amp._exit_autocast)
    s.add(torch._C._set_autograd_fallback_mode)


def _counts(
    compile_fn: Callable[..., Any], fn: Callable[..., Any], s: set[Any],
    change: Callable[[set[Any]], None],
) -> list[int]:
    """Frame counts after a call, a repeated call, and a call after ``change(s)``; each result
    compared with eager's on the set as it is then."""
    counter = GraphCounter()
    compiled = compile_fn(fn, backend=counter, fullgraph=True)
    x = torch.randn(4)
    counts = []
    for step in range(3):
        if step == 2:
            change(s)
        torch.testing.assert_close(compiled(x, s), fn(x, s))
        counts.append(counter.count)
    return counts


CASES = {
    "function_removed": (_branch_on_a_function, _functions, _without_exit),
    "function_swapped": (_branch_on_a_function, _functions, _exit_swapped),
    "string_removed_beside_nan_and_complex": (
        _branch_on_a_string, lambda: {"PyTorch", 3.3, 1j, math.nan},
        lambda s: s.remove("PyTorch"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_set_argument_that_changed_recompiles_like_torch(case: str) -> None:
    fn, make, change = CASES[case]
    ours = _counts(compile_api.compile, fn, make(), change)
    assert ours == [1, 1, 2]
    if TORCH_2_13:  # the reference behaviour is torch 2.13's
        torch._dynamo.reset()
        assert _counts(torch.compile, fn, make(), change) == ours


def _holds(x: torch.Tensor, s: set[Any], v: Any) -> tuple[torch.Tensor, bool]:
    return x + 1, v in s


def test_a_nan_member_is_found_by_identity_as_in_eager() -> None:
    """``nan in {nan}`` is True only for the same nan object: a set holding another nan, or a
    probe that is another nan, gives eager's False (the guards pin the objects)."""
    compiled = compile_api.compile(_holds, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    first, second = float("nan"), float("nan")
    for s, v in [({first, 1}, first), ({second, 1}, first), ({first, 1}, second),
                 ({first, 1}, first)]:
        got, expected = compiled(x, s, v), _holds(x, s, v)
        assert got[1] is expected[1]
        torch.testing.assert_close(got[0], expected[0])


def _mutates(x: torch.Tensor, s: set[Any]) -> tuple[torch.Tensor, list[str]]:
    s.discard(torch.sin)
    s.add(torch.cos)
    names = sorted(getattr(f, "__name__", repr(f)) for f in s)
    return x * len(s), names


def test_changes_to_a_set_of_functions_reach_the_caller_as_in_eager() -> None:
    compiled = compile_api.compile(_mutates, backend="eager", fullgraph=True)
    x = torch.ones(2)
    for _ in range(2):
        ours, theirs = {torch.sin, math.nan, 2j}, {torch.sin, math.nan, 2j}
        got, expected = compiled(x, ours), _mutates(x, theirs)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        assert ours == theirs
