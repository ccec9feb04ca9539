"""contextlib inside compiled code: nullcontext, suppress (an exception raised and
swallowed in the traced code), @contextmanager generators with effects before and after the
yield, compared with eager (results and effects) and torch.compile's graph count. ExitStack
(which reads sys.exc_info()) is not modelled: it runs eagerly, as under torch.compile."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from object_model_harness import run_three_ways, same
from stdlib_harness import check_whole

pytestmark = pytest.mark.usefixtures("errors_raise")


def _nullcontext(x: torch.Tensor) -> Any:
    with contextlib.nullcontext(x * 2) as y:
        z = y + 1
    with contextlib.nullcontext():
        z = z * 3
    return z


def _suppress(x: torch.Tensor, table: dict[str, int]) -> Any:
    y = x + 1
    with contextlib.suppress(KeyError, IndexError):
        y = y * table["missing"]
    with contextlib.suppress(KeyError):
        y = y * table["present"]
    return y


@contextlib.contextmanager
def _scoped(log: list[str], scale: int) -> Iterator[int]:
    log.append("enter")
    try:
        yield scale
    finally:
        log.append("exit")


def _generator_manager(x: torch.Tensor, log: list[str]) -> Any:
    with _scoped(log, 3) as k:
        y = x * k
    log.append("after")
    return y


@pytest.mark.parametrize(
    ("fn", "make"),
    [
        (_nullcontext, lambda: (torch.arange(3.0),)),
        (_suppress, lambda: (torch.arange(3.0), {"present": 2})),
        (_generator_manager, lambda: (torch.arange(3.0), [])),
    ],
    ids=["nullcontext", "suppress", "contextmanager"],
)
def test_contextlib_manager_matches_eager_in_one_graph(fn: Any, make: Any) -> None:
    check_whole(fn, make)


def _exit_stack(x: torch.Tensor, log: list[str]) -> Any:
    with contextlib.ExitStack() as stack:
        k = stack.enter_context(_scoped(log, 2))
        y = x * k
    return y


def test_an_exit_stack_runs_eagerly_with_eager_results() -> None:
    runs = run_three_ways(_exit_stack, lambda: (torch.arange(3.0), []))
    same(runs.ours, runs.eager)
    same(runs.our_args, runs.eager_args)
    assert runs.our_graphs <= runs.their_graphs
