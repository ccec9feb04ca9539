"""A trace that relied on which arguments are the same object is guarded on it (aliasing.py).

Found by the fuzzer's CI slice on 3.13 (seed 2026, program 8): 3.13's dataclass ``__eq__``
begins with ``if self is other: return True``; compiled for ``a == a`` it returned True for
``a == b`` on the next call. Each case calls the compiled function with the arguments aliased,
then not (and the other way round), against eager. (torch.compile 2.13 returns the stale result
in the three sequence cases here: its guards do not check this aliasing either.)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from counting_backend import Counting

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


class Box:
    def __init__(self, v: float) -> None:
        self.v = v


def same_object(x: torch.Tensor, a: Box, b: Box) -> Any:
    if a is b:
        return x + 1
    return x - 1, a is not b


def appends_through_one_alias(x: torch.Tensor, a: list[int], b: list[int]) -> Any:
    a.append(1)
    return x * len(b), a is b


def lists_compared_by_identity(x: torch.Tensor, a: list[int], b: list[int]) -> Any:
    return x + (1 if a is b else 2) + len(a)


def dict_write_through_one_alias(x: torch.Tensor, a: dict[str, int], b: dict[str, int]) -> Any:
    a["k"] = 2
    return x * len(b)


def _sequence(fn: Callable[..., Any], calls: list[Callable[[], tuple[Any, ...]]]) -> list[Any]:
    return [fn(*make()) for make in calls]


def _check_sequences(fn: Callable[..., Any], calls: list[Callable[[], tuple[Any, ...]]]) -> None:
    for order in (calls, calls[::-1]):
        want = _sequence(fn, order)
        compile_api.reset()
        got = _sequence(compile_api.compile(fn, backend=Counting()), order)
        assert repr(got) == repr(want)


def test_is_between_two_arguments_is_guarded_both_ways() -> None:
    box, other = Box(1.0), Box(1.0)
    _check_sequences(
        same_object,
        [lambda: (torch.ones(2), box, box), lambda: (torch.ones(2), box, other)],
    )


def test_a_list_passed_twice_is_not_taken_for_two_lists_on_the_next_call() -> None:
    _check_sequences(
        appends_through_one_alias,
        [lambda: (torch.ones(2), *([],) * 2), lambda: (torch.ones(2), [], [])],
    )


def test_a_dict_passed_twice_is_not_taken_for_two_dicts_on_the_next_call() -> None:
    _check_sequences(
        dict_write_through_one_alias,
        [lambda: (torch.ones(2), *({},) * 2), lambda: (torch.ones(2), {}, {})],
    )


def test_is_between_two_list_arguments_is_guarded_both_ways() -> None:
    shared = [1]
    _check_sequences(
        lists_compared_by_identity,
        [lambda: (torch.ones(2), shared, shared), lambda: (torch.ones(2), shared, [1])],
    )


_DATACLASS_MODULE = '''
import dataclasses

@dataclasses.dataclass
class Pair:
    k: int
    v: float

def compare(a, b):
    return [a != b, b == a, a == a]
'''


def test_dataclass_equality_in_a_module_outside_sys_modules(tmp_path: Path) -> None:
    # dataclasses' generated __eq__ then has __module__ None (the fuzzer loads its programs
    # so); it made the frame fail to compile (AttributeError) and run eagerly.
    path = tmp_path / "pair_module.py"
    path.write_text(_DATACLASS_MODULE)
    spec = importlib.util.spec_from_file_location("pair_module_not_in_sys_modules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pairs = [(-0.0, 0.0), (1.0, 2.0), (1.0, 1.0)]
    calls = [lambda a=a, b=b: (module.Pair(1, a), module.Pair(1, b)) for a, b in pairs]
    want = _sequence(module.compare, calls)
    compiled = compile_api.compile(module.compare, backend="eager", fullgraph=True)
    assert _sequence(compiled, calls) == want
