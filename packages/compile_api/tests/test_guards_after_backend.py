"""compile_api builds a frame's guards after the backend ran, from the capture's ShapeEnv.

A backend may read the symbolic sizes of the graph it is given and so add facts to the
ShapeEnv (``int(size)`` specialises it; ``size > 4`` records a relation): its code is then valid
only where they hold, so they must be guarded. End-to-end cases with aot's trace and inductor
are in the repository's tests/test_backend_shape_guards.py.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

import compile_api


def times_rows(x: torch.Tensor) -> torch.Tensor:
    return x * x.shape[0]


def _rows(gm: torch.fx.GraphModule) -> Any:
    """The first placeholder's row count as the capture made it (a SymInt under dynamic=True)."""
    return next(n for n in gm.graph.nodes if n.op == "placeholder").meta["example_value"].shape[0]


class Backend:
    """Runs ``decide(rows)`` on the graph's symbolic row count, then returns the graph as is."""

    def __init__(self, decide: Callable[[Any], object]) -> None:
        self.decide = decide
        self.calls = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.calls += 1
        self.decide(_rows(gm))
        return gm.forward


def _guard_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "strata.guards")


def test_a_size_the_backend_specialised_is_in_the_entrys_guards(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = Backend(int)
    fn = compile_api.compile(times_rows, backend=backend, dynamic=True)
    with caplog.at_level(logging.DEBUG, logger="strata.guards"):
        torch.testing.assert_close(fn(torch.ones(3, 2)), times_rows(torch.ones(3, 2)))
    assert "L['x'].size(0) == 3" in _guard_text(caplog)
    torch.testing.assert_close(fn(torch.ones(5, 2)), times_rows(torch.ones(5, 2)))
    assert backend.calls == 2
    torch.testing.assert_close(fn(torch.ones(3, 2)), times_rows(torch.ones(3, 2)))
    assert backend.calls == 2


def test_a_backend_that_reads_no_size_keeps_the_frame_general(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = Backend(lambda rows: None)
    fn = compile_api.compile(times_rows, backend=backend, dynamic=True)
    with caplog.at_level(logging.DEBUG, logger="strata.guards"):
        for n in (3, 5, 8):
            torch.testing.assert_close(fn(torch.ones(n, 2)), times_rows(torch.ones(n, 2)))
    assert backend.calls == 1
    assert "L['x'].size(0) ==" not in _guard_text(caplog)


def test_a_relation_the_backend_relied_on_is_guarded() -> None:
    backend = Backend(lambda rows: bool(rows > 4))
    fn = compile_api.compile(times_rows, backend=backend, dynamic=True)
    for n, calls in ((6, 1), (9, 1), (4, 2), (2, 2), (30, 2)):
        torch.testing.assert_close(fn(torch.ones(n, 2)), times_rows(torch.ones(n, 2)))
        assert backend.calls == calls, n


def test_a_bitwise_fact_the_backend_relied_on_is_guarded() -> None:
    backend = Backend(lambda rows: bool(rows & 1))
    fn = compile_api.compile(times_rows, backend=backend, dynamic=True)
    for n, calls in ((3, 1), (5, 1), (4, 2), (6, 2), (7, 2)):
        torch.testing.assert_close(fn(torch.ones(n, 2)), times_rows(torch.ones(n, 2)))
        assert backend.calls == calls, n


def _unrenderable(rows: Any) -> None:
    # a fact over sqrt(size) (math.sqrt would specialise the size): no guard predicate
    # renders it
    bool(torch._sym_sqrt(rows) > 1.5)


def test_a_fact_guards_cannot_express_runs_the_frame_eagerly_with_a_warning() -> None:
    fn = compile_api.compile(times_rows, backend=Backend(_unrenderable), dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5):
            torch.testing.assert_close(fn(torch.ones(n, 2)), times_rows(torch.ones(n, 2)))
    messages = [str(w.message) for w in caught if "could not build the guards" in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in caught]


def test_a_fact_guards_cannot_express_raises_without_suppress_errors() -> None:
    compile_api.config.suppress_errors = False
    fn = compile_api.compile(times_rows, backend=Backend(_unrenderable), dynamic=True)
    with pytest.raises(compile_api.InternalError):
        fn(torch.ones(3, 2))
