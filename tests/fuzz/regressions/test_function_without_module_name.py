"""Fuzz find of the 10,000-program run on the GPU machine (seed 20261127, program 30; Python
3.12, torch 2.11): 202 programs of the ``equality`` family compiled nothing and ran eagerly
with "AttributeError: 'NoneType' object has no attribute 'startswith'". A dataclass's generated
``__eq__`` in a module loaded without ``__name__`` has ``__module__`` None, and the VM's check
for ``torch.compiler.allow_in_graph`` read ``fn.__module__.startswith``. The fuzzer now fails a
program whose compile crashed (kind ``internal``) instead of counting a warning.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
import torch

import compile_api
from tests.conftest import GraphCounter


def _make_eq() -> Any:
    namespace: dict[str, Any] = {}  # no __name__: the function's __module__ is None
    exec("def eq(self, other):\n    return self.v == other.v\n", namespace)  # noqa: S102
    return namespace["eq"]


class Pair:
    __eq__ = _make_eq()
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, v: float) -> None:
        self.v = v


@dataclasses.dataclass
class Point:
    k: int
    v: float


def _compare(x: torch.Tensor, a: Any, b: Any) -> Any:
    t = x + a.v if a == b else x - b.v
    return t, [a != b, b == a, a == a]


@pytest.mark.parametrize("cls", [Pair, lambda v: Point(1, v)], ids=["exec_eq", "dataclass"])
@pytest.mark.parametrize("values", [(1.0, 1.0), (1.0, 2.0)])
def test_a_method_whose_module_is_none_compiles_and_matches_eager(
    cls: Any, values: tuple[float, float]
) -> None:
    assert Pair.__eq__.__module__ is None
    x = torch.tensor([1.0, -2.0])
    a, b = cls(values[0]), cls(values[1])
    counter = GraphCounter()
    compile_api.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an internal error would only warn and run eagerly
        got = compile_api.compile(_compare, backend=counter)(x, a, b)
    want = _compare(x, a, b)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1]
    assert counter.count == 1
    compile_api.reset()
