"""Two things real models hit after a graph break (issue #19, t5 with output_attentions=True):

- a library's logging helper installed on ``logging.Logger`` (transformers' ``warning_once``, an
  ``lru_cache`` over ``self.warning``) is called after the graph instead of breaking it: it still
  prints exactly when eager prints (once), and the frame compiles whole where torch.compile
  breaks at it;
- a frame whose arguments hold no tensor and whose code names no torch module is not compiled,
  as torch.compile decides (``has_tensor_in_frame``), unless it is the function handed to
  ``compile()``: a helper reached after a break with only strings is no broken frame of its own.

Every result is compared with eager; counts with torch.compile's on torch 2.13.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import compile_api
from benchmarks.zoo.measure import counting_torch_breaks
from compile_api.state import state

from .conftest import TORCH_2_13, GraphCounter

log = logging.getLogger("strata.tests.logging_helpers")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@functools.lru_cache(None)
def _warn_once(self: logging.Logger, *args: Any, **kwargs: Any) -> None:
    """transformers' ``Logger.warning_once``: a cached call of ``self.warning``."""
    self.warning(*args, **kwargs)


def _level_label(self: logging.Logger) -> str:
    """A helper on Logger that returns a value: the trace must not take it for None."""
    return logging.getLevelName(self.getEffectiveLevel())


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Records]:
    monkeypatch.setattr(logging.Logger, "strata_test_warn_once", _warn_once, raising=False)
    monkeypatch.setattr(logging.Logger, "strata_test_level_label", _level_label, raising=False)
    _warn_once.cache_clear()
    handler = _Records()
    log.addHandler(handler)
    log.propagate = False
    yield handler
    log.removeHandler(handler)
    log.propagate = True
    _warn_once.cache_clear()
    torch._dynamo.reset()


def warns_once_in_attention(x: torch.Tensor, flag: bool) -> torch.Tensor:
    y = x.softmax(-1)
    if flag:
        log.strata_test_warn_once("attention weights are not returned: %s", "sdpa")  # type: ignore[attr-defined]
    return y * 2


def _run(fn: Any, calls: int) -> list[torch.Tensor]:
    return [fn(torch.full((2, 3), float(i)), True) for i in range(calls)]


def test_a_logging_helper_is_called_after_the_graph_and_prints_once_like_eager(
    records: _Records,
) -> None:
    expected = _run(warns_once_in_attention, 3)
    assert len(records.records) == 1
    _warn_once.cache_clear()
    counter = GraphCounter()
    compiled = compile_api.compile(warns_once_in_attention, backend=counter, fullgraph=True)
    for got, want in zip(_run(compiled, 3), expected, strict=True):
        torch.testing.assert_close(got, want)
    # one more record, made by the helper's own line (the caller logging reports), as eager's
    assert [r.getMessage() for r in records.records] == [
        "attention weights are not returned: sdpa"
    ] * 2
    assert records.records[0].lineno == records.records[1].lineno
    assert records.records[1].funcName == "_warn_once"
    assert counter.count == 1
    # the cache decides at run time: cleared, the next call prints again, as eager would
    _warn_once.cache_clear()
    compiled(torch.ones(2, 3), True)
    assert len(records.records) == 3
    if TORCH_2_13:  # torch.compile breaks at every call of a Logger method
        _warn_once.cache_clear()
        theirs = GraphCounter()
        with counting_torch_breaks() as breaks:
            _run(torch.compile(warns_once_in_attention, backend=theirs), 3)
        assert counter.count <= theirs.count
        assert len(breaks) >= 1  # where this compiles whole


def test_a_logger_helper_that_returns_a_value_is_not_taken_for_none(records: _Records) -> None:
    def scaled_by_label(x: torch.Tensor) -> torch.Tensor:
        return x * len(log.strata_test_level_label())  # type: ignore[attr-defined]

    compiled = compile_api.compile(scaled_by_label, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(3)), scaled_by_label(torch.ones(3)))


def test_loggers_own_methods_still_break_and_name_the_callers_line(records: _Records) -> None:
    def warns_directly(x: torch.Tensor) -> torch.Tensor:
        log.warning("direct %d", 1)
        return x + 1

    warns_directly(torch.ones(1))
    compiled = compile_api.compile(warns_directly, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(1)), torch.ones(1) + 1)
    eager, ours = records.records
    assert (ours.lineno, ours.funcName) == (eager.lineno, eager.funcName) == (
        eager.lineno, "warns_directly"
    )
    assert sum(len(r.breaks) for r in state.records) == 1


def _note(message: str) -> None:
    print(message)  # a break: Python I/O


def adds_then_notes(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    _note("step")
    return y * 2


def test_a_helper_holding_no_tensor_is_not_compiled_after_a_break(
    capsys: pytest.CaptureFixture[str],
) -> None:
    counter = GraphCounter()
    compiled = compile_api.compile(adds_then_notes, backend=counter)
    torch.testing.assert_close(compiled(torch.ones(2)), adds_then_notes(torch.ones(2)))
    assert capsys.readouterr().out == "step\nstep\n"
    # adds_then_notes and its resume; _note, reached with only a string, is run as it is
    assert [r.code.co_name for r in state.records if not r.code.co_name.startswith("__")] == [
        "adds_then_notes"
    ]
    assert sum(len(r.breaks) for r in state.records) == 1
    if TORCH_2_13:
        torch._dynamo.reset()
        theirs = GraphCounter()
        with counting_torch_breaks() as breaks:
            torch.compile(adds_then_notes, backend=theirs)(torch.ones(2))
        torch._dynamo.reset()
        assert (counter.count, 1) == (theirs.count, len(breaks))


def counts_up(n: int) -> int:
    return n + 1


def test_the_compiled_function_itself_is_compiled_without_tensors() -> None:
    compiled = compile_api.compile(counts_up, backend="eager")
    assert compiled(3) == 4
    assert [r.code for r in state.records] == [counts_up.__code__]


def _scale_all(items: list[Any]) -> list[Any]:
    print("scaling")  # a break: the caller runs this call as it is, then this frame is asked
    return [t * 2 for t in items]


def test_a_frame_with_a_tensor_inside_a_list_argument_is_compiled() -> None:
    def outer(x: torch.Tensor) -> list[Any]:
        return _scale_all([x, x + 1])

    compiled = compile_api.compile(outer, backend="eager")
    for got, want in zip(compiled(torch.ones(2)), outer(torch.ones(2)), strict=True):
        torch.testing.assert_close(got, want)
    assert _scale_all.__code__ in [r.code for r in state.records]

