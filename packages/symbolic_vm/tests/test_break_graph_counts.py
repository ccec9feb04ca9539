"""Graph counts around breaks: no more graphs than torch.compile, the code on both sides
of a break compiled (a branch on a tensor, ``and``/``or`` on tensor bools, grad-mode blocks).

Each case runs eagerly, under compile_api.compile and under torch.compile on the same calls, and
compares the results with eager and the graph counts with torch.compile's (ours no more).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch_reference import torch_reference

import compile_api


class Counting:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def same(got: Any, want: Any) -> None:
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w)
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert torch.equal(got, want)
    else:
        assert got == want


def run_all_ways(
    fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], *, torch_right: bool = True
) -> tuple[int, int]:
    """Each call eagerly, under compile_api and under torch.compile (results compared with
    eager's, call by call; torch's only where ``torch_right``); the graph counts (ours,
    torch's)."""
    ours, theirs = Counting(), Counting()
    compile_api.reset()
    torch._dynamo.reset()
    compiled = compile_api.compile(fn, backend=ours)
    reference = torch.compile(fn, backend=theirs)
    for args in calls:
        want = fn(*args)
        same(compiled(*args), want)
        their_result = reference(*args)
        if torch_right:
            with torch_reference():
                same(their_result, want)
    compile_api.reset()
    torch._dynamo.reset()
    return ours.graphs, theirs.graphs


def and_of_tensor_bools(a: torch.Tensor, b: torch.Tensor) -> int:
    both = a.sum() > b.sum() and a.sum() > 0
    if both:
        return 1
    return 2


def or_of_tensor_bools(a: torch.Tensor, b: torch.Tensor) -> tuple[Any, ...]:
    first = a.sum() > b.sum() and a.sum() > 0
    second = a.sum() < b.sum() or b.sum() > 0
    if first and second:
        return 1, first, second
    return 2, first, second


def and_in_an_expression(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a * 2
    picked = (x.sum() > 0 and b.sum()) or a.mean()
    return picked + x


@pytest.mark.parametrize("fn", [and_of_tensor_bools, or_of_tensor_bools, and_in_an_expression])
def test_short_circuit_on_a_tensor_compiles_both_operands(fn: Callable[..., Any]) -> None:
    # Before: the statement holding `and`/`or` ran as bytecode (0 graphs, torch 3 and 6).
    one, two = torch.ones(10), torch.ones(10) * -2.0
    ours, theirs = run_all_ways(fn, [(one, two), (two, one), (one, one)])
    assert ours >= 2  # the operands before and after the jump are each in a graph
    with torch_reference():
        assert ours <= theirs


def paths_join(
    x: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor
) -> torch.Tensor:
    x = x + 1
    if c1:
        x = x + 2
    x = x + 3
    if c2:
        x = x + 4
    x = x + 5
    if c3:
        x = x + 6
    return x + 7


def test_branches_joining_again_share_resume_functions_whatever_arguments_alias() -> None:
    # The same two tensors are passed in every combination: an argument the trace never read
    # is passed on by name, unguarded (before: "c3 is still c1" guards, 20 graphs vs 7).
    x = torch.randn(10)
    t, f = torch.tensor([True]), torch.tensor([False])
    calls = [(x, a, b, c) for a in (t, f) for b in (t, f) for c in (t, f)]
    ours, theirs = run_all_ways(paths_join, calls)
    assert ours == 7
    with torch_reference():
        assert ours <= theirs


def break_inside_nested_grad_modes(x: torch.Tensor) -> torch.Tensor:
    before = torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        torch._dynamo.graph_break()
        with torch.set_grad_enabled(True):
            x = torch.mul(x, 5)
            torch._dynamo.graph_break()
            x = torch.sqrt(x)
            assert torch.is_grad_enabled()
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled() == before
    return x


def _no_grad_break(z: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        torch._dynamo.graph_break()
        return torch.sin(z)


def break_inside_an_inlined_no_grad(
    x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    a = torch.mm(x, y)
    z = _no_grad_break(z)
    return a, z, torch.is_grad_enabled()


@pytest.mark.parametrize("grad", [True, False])
def test_a_graph_of_grad_mode_switches_alone_is_not_compiled(grad: bool) -> None:
    # Before: a break right inside a grad-mode block compiled a graph holding only the
    # switches (PyTorch's test_nested_grad_mode_graph_break: 3 graphs vs torch's 2).
    a = torch.randn(3, 4).abs()
    x, y, z = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4)
    with torch.set_grad_enabled(grad):
        nested, theirs_nested = run_all_ways(break_inside_nested_grad_modes, [(a,), (a,), (a,)])
        inlined, theirs_inlined = run_all_ways(break_inside_an_inlined_no_grad, [(x, y, z)])
    assert (nested, inlined) == (2, 2)
    with torch_reference():
        assert nested <= theirs_nested
        assert inlined <= theirs_inlined


def range_iterator_across_a_break(a: torch.Tensor, b: torch.Tensor) -> tuple[Any, ...]:
    x = a + b
    rng = iter(range(3, 8, 2))
    torch._dynamo.graph_break()
    x = x + next(rng)
    return x, list(rng)


def tuple_iterator_across_a_break(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    it = iter((a + 1, b * 2, a - b))
    x = next(it)
    torch._dynamo.graph_break()
    for t in it:
        x = x * t
    return x


@pytest.mark.parametrize("fn", [range_iterator_across_a_break, tuple_iterator_across_a_break])
def test_an_iterator_over_a_tuple_or_range_crosses_a_break(fn: Callable[..., Any]) -> None:
    # Before: every statement using the iterator ran as bytecode (1 and 0 graphs vs torch's 2).
    one, two = torch.ones(10), torch.ones(10) * -2.0
    ours, theirs = run_all_ways(fn, [(one, two), (two, one), (one, one)])
    assert ours == 2  # the code after the break is compiled too, once for every call
    with torch_reference():
        assert ours <= theirs


def shared_iterator_across_a_break(a: torch.Tensor) -> tuple[Any, ...]:
    it = iter((a, a + 1, a + 2))
    alias = it
    torch._dynamo.graph_break()
    first = next(alias)
    return first, next(it), list(alias)


def list_iterator_then_the_list_grows(a: torch.Tensor) -> tuple[Any, ...]:
    items = [a, a + 1]
    it = iter(items)
    first = next(it)
    torch._dynamo.graph_break()
    items.append(a * 3)
    return first, list(it)


def range_iterator_passed_to_the_broken_call(a: torch.Tensor) -> tuple[Any, ...]:
    rng = iter(range(4))
    y = a * 2
    first = _next_after_a_break(rng)
    return y + first, list(rng)


def _next_after_a_break(it: Any) -> Any:
    torch._dynamo.graph_break()
    return next(it)


@pytest.mark.parametrize("fn", [
    shared_iterator_across_a_break, list_iterator_then_the_list_grows,
    range_iterator_passed_to_the_broken_call,
])
def test_iterators_that_cannot_cross_as_items_still_match_eager(fn: Callable[..., Any]) -> None:
    # One iterator under two names stays one object; one over a list sees the list grow (torch
    # 2.13 passes on the items it saw and misses the new one); one the broken call consumes is
    # the real one.
    torch_right = fn is not list_iterator_then_the_list_grows
    ours, theirs = run_all_ways(
        fn, [(torch.ones(3),), (torch.ones(3) * 2,)], torch_right=torch_right
    )
    with torch_reference():
        assert ours <= max(theirs, 1)
