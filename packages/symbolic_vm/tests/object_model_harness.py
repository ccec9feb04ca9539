"""Runs one function three ways -- eager, compile_api.compile, torch.compile -- on fresh
arguments each time, with counting backends, for the object-model and exception tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch
from counting_backend import Counting

import compile_api


@attrs.define
class Runs:
    eager: Any
    ours: Any
    theirs: Any
    our_graphs: int
    their_graphs: int
    eager_args: tuple[Any, ...]
    our_args: tuple[Any, ...]


def run_three_ways(
    fn: Callable[..., Any],
    make_args: Callable[[], tuple[Any, ...]],
    *,
    calls: int = 1,
    fresh: bool = False,
) -> Runs:
    """``fn(*make_args())`` eagerly, under compile_api.compile and under torch.compile (each
    with its own fresh arguments, each called ``calls`` times, on new arguments each call when
    ``fresh``); the last results, the graph counts and the (last) arguments eager and
    compile_api saw (to compare side effects)."""

    def run(call: Callable[..., Any]) -> tuple[Any, tuple[Any, ...]]:
        args = make_args()
        for i in range(calls):
            if fresh and i:
                args = make_args()
            result = call(*args)
        return result, args

    eager, eager_args = run(fn)
    ours_backend = Counting()
    compile_api.reset()
    ours, our_args = run(compile_api.compile(fn, backend=ours_backend))
    theirs_backend = Counting()
    torch._dynamo.reset()
    try:
        theirs, _ = run(torch.compile(fn, backend=theirs_backend))
    except Exception as error:  # noqa: BLE001 - the reference's own failure, not ours
        # Some torch releases fail inside Dynamo on constructs a later one captures (torch
        # 2.11 on named-tuple methods): the reference then gives no graph count to compare.
        theirs, theirs_backend = error, Counting()
    torch._dynamo.reset()
    return Runs(eager, ours, theirs, ours_backend.count, theirs_backend.count, eager_args,
                our_args)


def same(got: Any, want: Any) -> None:
    """Equal results: tensors by value, containers item by item, other values by ==."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, want)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want)
        for key in want:
            same(got[key], want[key])
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w)
    else:
        assert got == want
