"""``dir(obj)`` of a plain user object, from the frame or made in the trace: the full sorted
list equals eager's, one graph, and an attribute added to the instance or its class between
calls recompiles and gives the new list (graph counts as torch.compile's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from counting_backend import Counting

import compile_api


class Base:
    shared = 1

    def method(self) -> int:
        return 1


class Thing(Base):
    def __init__(self) -> None:
        self.a = 1

    @property
    def p(self) -> int:
        return 2


class _TorchCounter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: torch.fx.GraphModule, inputs: Any) -> Callable[..., Any]:
        self.count += 1
        return gm.forward


def dir_of_argument(t: torch.Tensor, o: Any) -> Any:
    return t + len(dir(o)), dir(o)


def dir_of_new_object(t: torch.Tensor, o: Any) -> Any:
    made = Thing()
    made.extra = 3
    del made.a
    return t * 2, dir(made)


def _compare(fn: Callable[[torch.Tensor, Any], Any], o: Any, ours: Any, theirs: Any) -> None:
    t = torch.arange(3.0)
    got, ref, eager = ours(t, o), theirs(t, o), fn(t, o)
    torch.testing.assert_close(got[0], eager[0])
    torch.testing.assert_close(ref[0], eager[0])
    assert got[1] == eager[1] == ref[1]


def test_dir_of_a_frame_object_is_one_graph_and_follows_new_attributes() -> None:
    compile_api.reset()
    torch._dynamo.reset()
    ours, theirs = Counting(), _TorchCounter()
    compiled = compile_api.compile(dir_of_argument, backend=ours)
    reference = torch.compile(dir_of_argument, backend=theirs)
    o = Thing()
    for _ in range(3):
        _compare(dir_of_argument, o, compiled, reference)
    assert ours.count == 1
    assert ours.count == theirs.count
    o.added = 5  # type: ignore[attr-defined]
    _compare(dir_of_argument, o, compiled, reference)
    assert ours.count == 2
    Base.on_class = 1  # type: ignore[attr-defined]
    try:
        _compare(dir_of_argument, o, compiled, reference)
        assert ours.count == 3
    finally:
        del Base.on_class  # type: ignore[attr-defined]


def test_dir_of_an_object_made_in_the_trace_matches_eager() -> None:
    compile_api.reset()
    torch._dynamo.reset()
    ours, theirs = Counting(), _TorchCounter()
    compiled = compile_api.compile(dir_of_new_object, backend=ours)
    reference = torch.compile(dir_of_new_object, backend=theirs)
    for _ in range(2):
        _compare(dir_of_new_object, None, compiled, reference)
    assert ours.count == 1
    assert ours.count == theirs.count
    Thing.later = 1  # type: ignore[attr-defined]
    try:
        _compare(dir_of_new_object, None, compiled, reference)
        assert ours.count == 2
    finally:
        del Thing.later  # type: ignore[attr-defined]


def test_dir_of_an_object_with_its_own_dir_runs_eagerly_and_correctly() -> None:
    compile_api.reset()

    class Custom:
        def __dir__(self) -> list[str]:
            return ["z", "y"]

    ours = Counting()
    compiled = compile_api.compile(dir_of_argument, backend=ours)
    t = torch.arange(3.0)
    got, eager = compiled(t, Custom()), dir_of_argument(t, Custom())
    torch.testing.assert_close(got[0], eager[0])
    assert got[1] == eager[1]
