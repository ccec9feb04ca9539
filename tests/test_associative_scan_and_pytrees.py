"""torch's ``associative_scan`` (generic mode) and ``torch.utils._pytree`` inside compiled code.

transformers' Mamba runs its selective scan, under a compiler and without CUDA kernels, as
``associative_scan(combine_fn, (A, B), dim=2, combine_mode="generic")``: torch.vmap of a nested
function over pairs of tensors, with the arguments flattened by torch's pytree. torch.compile
captures it in one graph; Strata took ``associative_scan`` for a torch op and broke (17 graphs,
13 breaks on a tiny Mamba). Each result here is compared with eager, and the counts with
torch.compile's on torch 2.13.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch._dynamo
import torch.utils._pytree as pytree
from torch._higher_order_ops.associative_scan import associative_scan

import compile_api

from .conftest import TORCH_2_13, GraphCounter


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    compile_api.reset()
    torch._dynamo.reset()
    yield
    compile_api.reset()
    torch._dynamo.reset()


def _graphs(
    compile_fn: Callable[..., Any], fn: Callable[..., Any], *args: Any, **options: Any
) -> int:
    counter = GraphCounter()
    got = compile_fn(fn, backend=counter, **options)(*args)
    torch.testing.assert_close(got, fn(*args))
    return counter.count


def selective_scan(a: torch.Tensor, b: torch.Tensor) -> Any:
    def combine_fn(left: Any, right: Any) -> tuple[torch.Tensor, torch.Tensor]:
        a_left, b_left = left
        a_right, b_right = right
        return a_left * a_right, a_right * b_left + b_right

    _, states = associative_scan(combine_fn, (a, b), dim=2, combine_mode="generic")
    return states.sum(-1) + 1


def test_generic_associative_scan_is_one_graph_like_torch() -> None:
    a, b = torch.rand(2, 3, 5, 4), torch.rand(2, 3, 5, 4)
    assert _graphs(compile_api.compile, selective_scan, a, b, fullgraph=True) == 1
    if TORCH_2_13:
        assert _graphs(torch.compile, selective_scan, a, b, fullgraph=True) == 1


def test_generic_associative_scan_trains_like_eager() -> None:
    a = torch.rand(2, 3, 6, 4, requires_grad=True)
    b = torch.rand(2, 3, 6, 4, requires_grad=True)
    selective_scan(a, b).sum().backward()  # type: ignore[no-untyped-call]
    want = [a.grad, b.grad]
    a.grad = b.grad = None
    compiled = compile_api.compile(selective_scan, backend="aot_eager", fullgraph=True)
    compiled(a, b).sum().backward()  # type: ignore[no-untyped-call]
    torch.testing.assert_close([a.grad, b.grad], want)


def test_pointwise_associative_scan_still_runs_as_eager_does() -> None:
    """The pointwise mode (CUDA kernels only) is not traced: a graph break, eager's error."""

    def scan(x: torch.Tensor) -> torch.Tensor:
        return associative_scan(lambda p, q: p + q, x, dim=0) * 2

    x = torch.rand(4, 3)
    with pytest.raises(ValueError, match="pointwise"):
        scan(x)
    with pytest.raises(ValueError, match="pointwise"):
        compile_api.compile(scan, backend="eager")(x)


def pytree_round_trip(x: torch.Tensor, y: torch.Tensor) -> Any:
    tree = {"a": (x, [y, y - 1]), "b": x * 2}
    leaves, spec = pytree.tree_flatten(tree)
    doubled = pytree.tree_unflatten([t * 2 for t in leaves], spec)
    summed = pytree.tree_map(lambda p, q: p + q, doubled, tree)
    return pytree.tree_leaves(summed), doubled["a"][1][1], len(leaves)


def test_pytree_flatten_unflatten_and_map_are_traced() -> None:
    x, y = torch.rand(3), torch.rand(3)
    assert _graphs(compile_api.compile, pytree_round_trip, x, y, fullgraph=True) == 1
    if TORCH_2_13:
        assert _graphs(torch.compile, pytree_round_trip, x, y, fullgraph=True) == 1


def test_vmap_over_tuples_of_tensors_is_one_graph() -> None:
    def pairwise(a: torch.Tensor, b: torch.Tensor) -> Any:
        return torch.func.vmap(lambda pair: pair[0] * pair[1].sum())((a, b))

    a, b = torch.rand(4, 3), torch.rand(4, 3)
    assert _graphs(compile_api.compile, pairwise, a, b, fullgraph=True) == 1
    if TORCH_2_13:
        assert _graphs(torch.compile, pairwise, a, b, fullgraph=True) == 1


def test_pytree_of_a_named_tuple_falls_back_to_eager_correctly() -> None:
    """Node types the VM does not model (named tuples) are a graph break, not a wrong tree."""
    from collections import namedtuple

    Pair = namedtuple("Pair", "first second")

    def flat(x: torch.Tensor) -> Any:
        leaves, spec = pytree.tree_flatten(Pair(x, x + 1))
        return pytree.tree_unflatten([t * 3 for t in leaves], spec)

    x = torch.rand(3)
    got = compile_api.compile(flat, backend="eager")(x)
    assert type(got) is Pair
    torch.testing.assert_close(tuple(got), tuple(flat(x)))


def test_generic_associative_scan_under_dynamic_shapes_is_one_graph_for_two_lengths() -> None:
    """The scan asks ``result.shape.numel()`` of a size with symbolic entries (Mamba under
    dynamic=True broke there in every step: 19 graphs where torch.compile has 2)."""
    ours, theirs = GraphCounter(), GraphCounter()
    compiled = compile_api.compile(selective_scan, backend=ours, dynamic=True, fullgraph=True)
    reference = torch.compile(selective_scan, backend=theirs, dynamic=True, fullgraph=True)
    for length in (5, 8):
        a, b = torch.rand(2, 3, length, 4), torch.rand(2, 3, length, 4)
        want = selective_scan(a, b)
        torch.testing.assert_close(compiled(a, b), want)
        torch.testing.assert_close(reference(a, b), want)
    assert ours.count <= theirs.count if TORCH_2_13 else ours.count >= 1


def test_numel_of_a_symbolic_size_is_the_product_of_its_entries() -> None:
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * x.shape.numel() + x[:, 1:].size().numel()

    counter = GraphCounter()
    compiled = compile_api.compile(scaled, backend=counter, dynamic=True, fullgraph=True)
    for n in (3, 5):
        x = torch.rand(2, n)
        torch.testing.assert_close(compiled(x), scaled(x))
    assert counter.count == 1
