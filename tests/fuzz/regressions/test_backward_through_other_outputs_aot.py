"""Fuzz finds of the 10,000-program run (seed 20261129, programs 5133 and 5372, aot_eager).

A ``.backward()`` inside ``fn`` through some outputs of a compiled region, then the runner's
backward through its other outputs: Strata's aot_eager raised "backward through the graph a
second time" where eager does not (torch.compile 2.13's aot_eager raises too). Cause: a
compiled region is one autograd node, so the first backward freed every saved value of it,
where eager frees only the buffers of the op nodes that backward ran. Fixed in
``aot.partial_backward``: a backward with some output gradients absent reads the backward
graph with those as structural zeros; the saved values that nodes not yet run still read are
kept, a later backward runs from them, and one that needs a node an earlier backward ran
raises eager's error. Input gradients no live node gives are None, as eager leaves them.
"""

# ruff: noqa: E501
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import compile_api
from tests.fuzz.runner import check_source

SOURCE_5372 = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)

def extra_args(call, x, y, n):
    wf0_1 = x.requires_grad_()
    wf1_1 = y
    return (wf0_1, wf1_1)

def fn(x, y, n, lst, wf0_1, wf1_1):
    tf0_4 = y * wf0_1
    tf1_2 = torch.where(x > 0, x, wf1_1)
    tf1_2.sum().backward()
    gf1_3 = wf1_1.grad
    tf1_2 = tf1_2.detach()
    return (x, y, tf0_4, gf1_3, tf1_2)
"""

SOURCE_5133 = """\
import torch
G = 0
GL = []
GT = torch.tensor(0.5)

def extra_args(call, x, y, n):
    wf0_1 = torch.full_like(x, 0.5).requires_grad_()
    wf1_1 = torch.tensor(0.7, requires_grad=True)
    return (wf0_1, wf1_1)

def fn(x, y, n, lst, wf0_1, wf1_1):
    x[0] = GT
    with torch.set_grad_enabled(True):
        tf0_2 = torch.sin(wf0_1) * y
    with torch.no_grad():
        tf0_4 = x * wf0_1
    tf0_6 = x + wf0_1
    tf1_2 = (x * wf1_1).amax() + torch.sigmoid(y * wf1_1)
    tf1_2.sum().backward()
    gf1_3 = wf1_1.grad.clone()
    tf1_2 = tf1_2.detach()
    return (y, tf0_2, tf0_4, tf0_6, gf1_3, tf1_2)
"""

INPUTS = [
    {"x": [-1.078, 0.706, -1.68], "y": [-1.49, 0.348, -0.82], "n": 4, "lst": [-0.06]},
    {"x": [-1.078, 0.706, -1.68], "y": [-1.49, 0.348, -0.82], "n": 4, "lst": [-0.06]},
    {"x": [-0.625, 0.142, -1.2], "y": [-0.005, 0.815, 0.121], "n": 4, "lst": [-0.83]},
    {"x": [-1.038, 0.883, -0.035, 1.216], "y": [0.319, -0.124, 1.727, -1.169], "n": 5, "lst": [-0.65]},
]


@pytest.mark.parametrize("source", [SOURCE_5372, SOURCE_5133], ids=["5372", "5133"])
def test_backward_through_other_outputs_after_inner_backward_matches_eager(source: str) -> None:
    failure = check_source(source, "aot_eager", INPUTS)
    assert failure is None, str(failure)


def _two_backwards(fn: Callable[..., Any], second: int) -> tuple[Any, ...]:
    """fn's outputs [0] backpropagated, then output ``second``: the leaves' grads, or the
    error type of the second backward."""
    a = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    b = torch.tensor([1.5, 0.4, -0.7], requires_grad=True)
    c = torch.tensor([0.9, 0.1, 0.2], requires_grad=True)
    outs = fn(a, b, c)
    outs[0].sum().backward()
    first = tuple(None if t.grad is None else t.grad.clone() for t in (a, b, c))
    try:
        outs[second].sum().backward()
    except RuntimeError as err:
        return first, type(err)
    return first, tuple(None if t.grad is None else t.grad.clone() for t in (a, b, c))


def _disjoint(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # b is saved by both products: eager's two nodes hold a copy each
    return (a * b).sin(), (b * c).exp(), a + c


def _shared_node(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # the second backward needs the product's node that the first ran: eager raises
    t = a * b
    return t.sin(), t.cos(), c * 2


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, tuple):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y, strict=True))
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and torch.allclose(x, y, rtol=1e-6, atol=0)
    return bool(x == y)


@pytest.mark.parametrize(
    ("fn", "second"),
    [(_disjoint, 1), (_disjoint, 2), (_shared_node, 1), (_shared_node, 2)],
    ids=["disjoint-product", "disjoint-sum", "shared-node-raises", "shared-other"],
)
def test_second_backward_frees_and_keeps_what_eager_does(
    fn: Callable[..., Any], second: int
) -> None:
    expected = _two_backwards(fn, second)
    compile_api.reset()
    got = _two_backwards(compile_api.compile(fn, backend="aot_eager", fullgraph=True), second)
    compile_api.reset()
    # after the first backward, c has no gradient in eager (None, not zeros)
    assert _same(expected, got), (expected, got)


def test_an_output_never_backpropagated_leaves_no_zero_gradient() -> None:
    def fn(a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a * 3, c.exp()

    # (torch.compile 2.13's aot_eager gives c a zero gradient here: eager's None is the reference)
    compile_api.reset()
    compiled = compile_api.compile(fn, backend="aot_eager", fullgraph=True)
    for f in (fn, compiled):
        a, c = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        f(a, c)[0].sum().backward()
        assert a.grad is not None and torch.equal(a.grad, torch.full((2,), 3.0))
        assert c.grad is None, f
    compile_api.reset()


def _three_outputs(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    t = a * b
    return t.sin(), (b * c).exp(), t.cos()


@pytest.mark.parametrize(
    "script",
    [
        [(0, True), (0, False), (2, False)],
        [(0, False), (1, False), (2, False)],
        [(1, False), (0, False), (2, False)],
        # retained backwards free nothing: after a freeing one through output 1, output 0's
        # nodes still hold their values
        [(0, True), (2, True), (1, False), (0, False)],
    ],
)
def test_retained_and_freeing_backwards_in_any_order_match_eager(
    script: list[tuple[int, bool]],
) -> None:
    def run(fn: Callable[..., Any]) -> list[Any]:
        a = torch.tensor([0.3, -1.2], requires_grad=True)
        b = torch.tensor([1.5, 0.4], requires_grad=True)
        c = torch.tensor([0.9, 0.1], requires_grad=True)
        outs = fn(a, b, c)
        got: list[Any] = []
        for index, retain in script:
            try:
                outs[index].sum().backward(retain_graph=retain)
            except RuntimeError as err:
                got.append(type(err))
                continue
            got.append(tuple(None if t.grad is None else t.grad.clone() for t in (a, b, c)))
        return got

    compile_api.reset()
    expected = run(_three_outputs)
    got = run(compile_api.compile(_three_outputs, backend="aot_eager", fullgraph=True))
    compile_api.reset()
    assert _same(tuple(expected), tuple(got)), (expected, got)
