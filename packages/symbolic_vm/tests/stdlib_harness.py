"""One check for the standard-library tests: ``fn`` under compile_api.compile equals eager
(results and what it did to its arguments), it is captured whole (``fullgraph=True`` works),
and in no more graphs than torch.compile makes of it (one, where it makes none)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from object_model_harness import run_three_ways, same

import compile_api


def check_whole(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]]) -> Any:
    runs = run_three_ways(fn, make_args)
    same(runs.ours, runs.eager)
    same(runs.our_args, runs.eager_args)
    # Where torch.compile captures nothing (it runs the frame eagerly: 0 graphs), one whole
    # graph -- proven by fullgraph=True below -- is the better answer, not a regression.
    assert runs.our_graphs <= max(runs.their_graphs, 1)
    compile_api.reset()
    args = make_args()
    same(compile_api.compile(fn, backend="eager", fullgraph=True)(*args), fn(*make_args()))
    return runs
