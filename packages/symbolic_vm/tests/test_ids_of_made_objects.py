"""``id()`` of objects whose identity the trace tracks itself (made in the frame, graph tensors):
compared and hashed as eager does, in one graph; any use that needs the number itself
(arithmetic, ordering, printing, returning it) runs eagerly at a break, never on a made-up
number. Each compared with eager, the traced ones with torch.compile's graph count too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from counting_backend import Counting
from torch_reference import torch_reference

import compile_api

pytestmark = pytest.mark.usefixtures("errors_raise")


def _run(fn: Callable[..., Any], x: torch.Tensor) -> tuple[Any, int, list[str]]:
    """``fn(x)`` under compile_api: result, graph count and break reasons."""
    backend = Counting()
    compile_api.reset()
    result = compile_api.compile(fn, backend=backend)(x)
    reasons = [r.reason for r in compile_api.explain(fn)(x).break_reasons]
    return result, backend.count, reasons


def _torch_graphs(fn: Callable[..., Any], x: torch.Tensor) -> int:
    backend = Counting()
    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(x)
    torch._dynamo.reset()
    return backend.count


def _dedupe_by_identity(x: torch.Tensor) -> Any:
    a: list[Any] = [1]
    b = a
    c: list[Any] = [1]
    y = x * 2
    seen: dict[int, str] = {}
    for name, obj in (("a", a), ("b", b), ("c", c), ("x", x), ("y", y), ("x2", x)):
        seen.setdefault(id(obj), name)
    return (
        sorted(seen.values()),
        id(a) == id(b),
        id(a) != id(c),
        isinstance(id(y), int),
        bool(id(c)),
        y + len(seen),
    )


def test_ids_compare_and_key_dicts_as_in_eager_in_one_graph() -> None:
    x = torch.randn(3)
    got, graphs, reasons = _run(_dedupe_by_identity, x)
    want = _dedupe_by_identity(x)
    assert got[:5] == want[:5] == (["a", "c", "x", "y"], True, True, True, True)
    torch.testing.assert_close(got[5], want[5])
    assert not reasons
    assert graphs == 1
    with torch_reference():
        assert graphs <= _torch_graphs(_dedupe_by_identity, x)


def _id_plus_one(x: torch.Tensor) -> Any:
    a: list[Any] = []
    return x + 1, (id(a) + 1) - id(a)


def _id_as_text(x: torch.Tensor) -> Any:
    a: list[Any] = []
    return x + 1, len(f"{id(a)}") > 0, str(id(a)).isdigit()


def _id_ordering(x: torch.Tensor) -> Any:
    a: list[Any] = []
    b: list[Any] = []
    return x + 1, (id(a) < id(b)) or (id(b) < id(a))


def _id_returned(x: torch.Tensor) -> Any:
    a = [x]
    return a, id(a)


def _id_compared_with_an_outside_id(x: torch.Tensor) -> Any:
    a: list[Any] = []
    return x + 1, id(a) == id(torch)


@pytest.mark.parametrize(
    "fn", [_id_plus_one, _id_as_text, _id_ordering, _id_compared_with_an_outside_id]
)
def test_using_the_number_runs_eagerly_with_eagers_result(fn: Callable[..., Any]) -> None:
    x = torch.randn(3)
    got, _, reasons = _run(fn, x)
    want = fn(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:]
    assert any("id()" in r for r in reasons), reasons


def test_an_id_returned_with_its_object_is_that_objects_id() -> None:
    x = torch.randn(3)
    (a, ident), _, reasons = _run(_id_returned, x)
    assert ident == id(a)  # the real id, computed where the list really exists
    assert any("id()" in r for r in reasons), reasons
