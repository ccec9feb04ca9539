"""A ``nonstrict_trace`` function given user objects of registered pytree classes.

Each object is flattened in the trace (its fields' current values), and the function runs in
the graph on objects rebuilt from the leaves, as torch.compile does: one graph under fullgraph,
results and the caller's objects as eager's. Graph counts are compared with torch.compile's
(torch 2.13's behaviour is the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo
import torch.utils._pytree as pytree

import compile_api

from .conftest import TORCH_2_13, GraphCounter


class Point:
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x = x
        self.y = y


class Labelled:
    def __init__(self, p: Point, t: torch.Tensor, scale: float) -> None:
        self.p = p
        self.t = t
        self.scale = scale


pytree.register_pytree_node(
    Point,
    lambda p: ((p.x, p.y), None),
    lambda xy, _: Point(xy[0], xy[1]),
    serialized_type_name="tests.Point",
)
pytree.register_pytree_node(
    Labelled,
    lambda lab: ((lab.p, lab.t), lab.scale),
    lambda children, scale: Labelled(children[0], children[1], scale),
    serialized_type_name="tests.Labelled",
)


@torch._dynamo.nonstrict_trace
def _product(p: Point, k: torch.Tensor) -> torch.Tensor:
    torch._dynamo.graph_break()  # not traced: the function runs as it is
    return p.x * p.y + k


@torch._dynamo.nonstrict_trace
def _nested(lab: Labelled) -> dict[str, torch.Tensor]:
    return {"out": (lab.t + lab.p.x * lab.p.y) * lab.scale}


def fields_set_before_the_call(p: Point, k: torch.Tensor) -> Any:
    p.x = p.x + 1
    res = _product(p, k)
    return res, p.x, p.y


def objects_made_in_the_frame(x: torch.Tensor, y: torch.Tensor) -> Any:
    return _nested(Labelled(Point(x, y), x - y, 0.5))["out"].sum()


def _compare(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]]) -> None:
    args = make_args()
    eager_args = make_args()
    expected = fn(*eager_args)
    counter = GraphCounter()
    got = compile_api.compile(fn, backend=counter, fullgraph=True)(*args)
    torch.testing.assert_close(got, expected)
    for ours, theirs in zip(args, eager_args, strict=True):
        if isinstance(ours, Point):  # the caller's object got eager's field values
            torch.testing.assert_close((ours.x, ours.y), (theirs.x, theirs.y))
    assert counter.count == 1
    if not TORCH_2_13:  # the reference behaviour is torch 2.13's
        return
    torch._dynamo.reset()
    theirs_counter = GraphCounter()
    reference = torch.compile(fn, backend=theirs_counter, fullgraph=True)(*make_args())
    torch.testing.assert_close(reference, expected)
    assert theirs_counter.count == counter.count


torch.manual_seed(0)
_X, _Y = torch.randn(4), torch.randn(1)


def test_pre_existing_object_is_flattened_with_the_fields_set_in_the_frame() -> None:
    _compare(fields_set_before_the_call, lambda: (Point(_X.clone(), _Y.clone()), _Y * 2))


def test_nested_objects_made_in_the_frame_are_rebuilt_with_their_context() -> None:
    _compare(objects_made_in_the_frame, lambda: (_X, _Y))
