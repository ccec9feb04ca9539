"""torch's ``wrap`` and ``control_flow.map`` higher-order functions inside compiled code.

``wrap(fn, *args)`` calls ``fn(*args)`` (its body traced inline); ``map(f, xs, *args)`` is
unrolled over ``xs``'s leading dimension and the results stacked. Each program is compared with
eager, and its graph count with torch.compile's (torch 2.13's behaviour is the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import functorch.experimental.control_flow as control_flow
import torch
import torch._dynamo
from torch._higher_order_ops.wrap import wrap

import compile_api

from .conftest import TORCH_2_13, GraphCounter

OFFSET = torch.tensor([0.5, -1.0, 2.0])
SCALE = 3.0


def nested_wraps_over_a_global_and_a_closure(x: torch.Tensor, y: torch.Tensor) -> Any:
    z = x * y

    def body(a: torch.Tensor, k: float = 1.0) -> Any:
        return [torch.sin(a) + wrap(lambda b: b + z + OFFSET, a), {"k": k * SCALE}]

    return wrap(body, x, k=2.0)


def nested_maps_with_an_extra_argument(xs: torch.Tensor, y: torch.Tensor) -> Any:
    def inner(x: torch.Tensor, y: torch.Tensor) -> Any:
        def inner2(x: torch.Tensor, y: torch.Tensor) -> Any:
            return x * y, x.cos()

        return control_flow.map(inner2, x, y)

    return control_flow.map(inner, xs, y)


def map_over_a_list_of_tensors(a: torch.Tensor, b: torch.Tensor) -> Any:
    return control_flow.map(lambda pair, s: pair[0] - pair[1] * s, [a, b], OFFSET)


def _compare(fn: Callable[..., Any], *args: torch.Tensor) -> None:
    expected = fn(*args)
    counter = GraphCounter()
    got = compile_api.compile(fn, backend=counter, fullgraph=True)(*args)
    torch.testing.assert_close(got, expected)
    assert counter.count == 1
    if not TORCH_2_13:  # the reference behaviour is torch 2.13's
        return
    torch._dynamo.reset()
    theirs = GraphCounter()
    torch.testing.assert_close(torch.compile(fn, backend=theirs, fullgraph=True)(*args), expected)
    assert theirs.count == counter.count


def test_wrap_calls_its_body_with_keywords_closures_and_globals_in_one_graph() -> None:
    _compare(nested_wraps_over_a_global_and_a_closure, torch.randn(3), torch.randn(3))


def test_nested_map_stacks_tuple_results_over_the_leading_dimension() -> None:
    _compare(nested_maps_with_an_extra_argument, torch.randn(2, 3, 3), torch.randn(3))


def test_map_over_a_list_of_tensors_slices_each_in_step() -> None:
    _compare(map_over_a_list_of_tensors, torch.randn(2, 3), torch.randn(2, 3))


def test_wrap_body_with_a_graph_break_runs_as_eager_without_fullgraph() -> None:
    def body(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    def f(x: torch.Tensor) -> torch.Tensor:
        return wrap(body, x.clone()) * 2

    x = torch.randn(3)
    got = compile_api.compile(f, backend=GraphCounter())(x)
    torch.testing.assert_close(got, f(x))


def test_map_unrolled_for_one_leading_size_is_not_reused_for_another() -> None:
    compiled = compile_api.compile(map_over_a_list_of_tensors, backend=GraphCounter())
    for n in (2, 3, 2):
        a, b = torch.randn(n, 3), torch.randn(n, 3)
        torch.testing.assert_close(compiled(a, b), map_over_a_list_of_tensors(a, b))
