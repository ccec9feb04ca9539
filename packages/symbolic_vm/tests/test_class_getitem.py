"""``C[key]`` on a class from the frame calls ``C.__class_getitem__``: a user's (traced like a
method; patching it recompiles), ``typing.Generic``'s and builtin classes' (``list[int]``):
one graph, no break, results equal to eager and the graph count equal to torch.compile's."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import torch
from counting_backend import Counting

import compile_api

T = typing.TypeVar("T")


class Box(typing.Generic[T]):
    pass


class Scaled:
    def __class_getitem__(cls, factor: float) -> float:
        return factor * 2


class _TorchCounter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: torch.fx.GraphModule, inputs: Any) -> Callable[..., Any]:
        self.count += 1
        return gm.forward


def subscripts(t: torch.Tensor) -> Any:
    return t * Scaled[1.5], Box[int], list[int], dict[str, float]


def _run_both(fn: Callable[[torch.Tensor], Any], calls: int) -> tuple[Counting, _TorchCounter]:
    ours, theirs = Counting(), _TorchCounter()
    compiled = compile_api.compile(fn, backend=ours)
    reference = torch.compile(fn, backend=theirs)
    for _ in range(calls):
        t = torch.arange(3.0)
        got, ref, eager = compiled(t), reference(t), fn(t)
        torch.testing.assert_close(got[0], eager[0])
        torch.testing.assert_close(ref[0], eager[0])
        assert got[1:] == eager[1:] == ref[1:]
    return ours, theirs


def test_class_subscripts_are_one_graph_as_torch_compile() -> None:
    compile_api.reset()
    torch._dynamo.reset()
    ours, theirs = _run_both(subscripts, 3)
    assert ours.count == 1
    assert ours.count == theirs.count


def test_patching_a_class_getitem_recompiles() -> None:
    compile_api.reset()

    class Local:
        def __class_getitem__(cls, factor: float) -> float:
            return factor * 2

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t * Local[3.0]  # type: ignore[misc]

    ours = Counting()
    compiled = compile_api.compile(fn, backend=ours)
    t = torch.arange(3.0)
    torch.testing.assert_close(compiled(t), fn(t))
    Local.__class_getitem__ = classmethod(lambda cls, f: f * 10)  # type: ignore[assignment,method-assign]
    torch.testing.assert_close(compiled(t), fn(t))
    assert ours.count == 2


def test_subscripting_a_class_without_class_getitem_raises_as_eager() -> None:
    compile_api.reset()

    class Plain:
        pass

    def fn(t: torch.Tensor) -> torch.Tensor:
        try:
            Plain[int]  # type: ignore[misc]
        except TypeError:
            return t + 1
        return t

    compiled = compile_api.compile(fn, backend=Counting())
    t = torch.arange(3.0)
    torch.testing.assert_close(compiled(t), fn(t))
