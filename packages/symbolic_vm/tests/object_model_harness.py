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
    fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]], *, calls: int = 1
) -> Runs:
    """``fn(*make_args())`` eagerly, under compile_api.compile and under torch.compile (each
    with its own fresh arguments, each called ``calls`` times); the last results, the graph
    counts and the arguments eager and compile_api saw (to compare side effects)."""
    eager_args = make_args()
    for _ in range(calls):
        eager = fn(*eager_args)
    ours_backend = Counting()
    compile_api.reset()
    our_args = make_args()
    compiled = compile_api.compile(fn, backend=ours_backend)
    for _ in range(calls):
        ours = compiled(*our_args)
    theirs_backend = Counting()
    torch._dynamo.reset()
    their_args = make_args()
    reference = torch.compile(fn, backend=theirs_backend)
    for _ in range(calls):
        theirs = reference(*their_args)
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
