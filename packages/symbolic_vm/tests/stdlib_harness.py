"""One check for the standard-library tests: ``fn`` under compile_api.compile equals eager
(results and what it did to its arguments), it is captured whole (``fullgraph=True`` works),
and in no more graphs than torch.compile makes of it (one, where it makes none)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from object_model_harness import run_three_ways, same

import compile_api


def _comparable(value: Any) -> Any:
    """``value`` with deques spelled out (object_model_harness.same compares them by ==)."""
    if isinstance(value, collections.deque):
        return ("deque", value.maxlen, [_comparable(v) for v in value])
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return type(value)(_comparable(v) for v in value)
    return value


def check_whole(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]]) -> Any:
    runs = run_three_ways(fn, make_args)
    same(_comparable(runs.ours), _comparable(runs.eager))
    same(_comparable(runs.our_args), _comparable(runs.eager_args))
    # Where torch.compile captures nothing (it runs the frame eagerly: 0 graphs), one whole
    # graph -- proven by fullgraph=True below -- is the better answer, not a regression.
    assert runs.our_graphs <= max(runs.their_graphs, 1)
    compile_api.reset()
    args = make_args()
    whole = compile_api.compile(fn, backend="eager", fullgraph=True)(*args)
    same(_comparable(whole), _comparable(fn(*make_args())))
    return runs
