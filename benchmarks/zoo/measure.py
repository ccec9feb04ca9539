"""Run a zoo case eagerly, under Strata and under torch.compile, counting graphs and breaks.

Both compilers get the same kind of backend: the named one (``eager``, ``aot_eager``,
``inductor``) wrapped in a counter that records each graph it is handed. Breaks are Strata's
records of the run (``compile_api``'s frame records) and torch's graph-break log records, each
one per frame that broke.
Every run starts from a reset compiler and a freshly built model, so runs are independent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .models import Case, run_case

__all__ = [
    "Outcome",
    "assert_matches",
    "counting_torch_breaks",
    "run_eager",
    "run_strata",
    "run_torch",
    "tolerance",
]


@dataclass
class Outcome:
    """What one compiled run of a case gave: the tensors to compare, the counts, the time."""

    tensors: list[torch.Tensor]
    graphs: int
    breaks: int
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0  # the whole run: capture, backend compile and the calls
    compiles: int = 0  # frame compiles, first ones and recompiles


class _Counting:
    """A backend that records the graphs it is given and compiles them with ``inner``."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.graphs: list[torch.fx.GraphModule] = []
        self.__name__ = f"counting_{getattr(inner, '__name__', 'backend')}"

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.graphs.append(gm)
        return self.inner(gm, example_inputs)


def tolerance(backend: str) -> dict[str, float]:
    """How close a compiled result must be to eager's: float32 models of width 32.

    eager and aot_eager run the same aten ops in the same order (aot may decompose a few), so
    they match tightly; inductor fuses and reorders reductions, so it gets a looser bound.
    """
    if backend == "inductor":
        return {"rtol": 1e-3, "atol": 1e-4}
    return {"rtol": 1e-4, "atol": 1e-5}


def assert_matches(actual: list[torch.Tensor], expected: list[torch.Tensor], backend: str) -> None:
    """Every tensor of a compiled run is close to eager's (outputs, loss, gradients, buffers)."""
    assert len(actual) == len(expected), f"{len(actual)} tensors, eager gave {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(a, e, **tolerance(backend), msg=lambda m, i=i: f"#{i}: {m}")


def run_eager(case: Case) -> list[torch.Tensor]:
    """The reference: the case run eagerly on a fresh build."""
    return run_case(case, case.model.build(), None)


def run_strata(case: Case, backend: str = "eager", *, fullgraph: bool = False) -> Outcome:
    """The case under ``compile_api.compile(model, backend=<counting backend>)``."""
    import compile_api
    from compile_api.state import state

    compile_api.reset()
    counting = _Counting(compile_api.lookup_backend(backend))
    dynamic = True if case.mode == "dynamic" else None
    built = case.model.build()
    start = time.perf_counter()
    try:
        tensors = run_case(
            case,
            built,
            lambda m: compile_api.compile(
                m, backend=counting, dynamic=dynamic, fullgraph=fullgraph
            ),
        )
        seconds = time.perf_counter() - start
        with state.lock:
            breaks = [b for r in state.records for b in r.breaks]
            compiles = len(state.records)
        reasons = [f"{b.reason} ({b.filename}:{b.lineno})" for b in breaks]
        return Outcome(tensors, len(counting.graphs), len(breaks), reasons, seconds, compiles)
    finally:
        compile_api.reset()


class _BreakLog(logging.Handler):
    """Collects torch's graph-break log records: one per frame whose trace broke."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.reasons.append(record.getMessage().splitlines()[0][:300])


@contextlib.contextmanager
def counting_torch_breaks() -> Iterator[list[str]]:
    """The graph breaks torch.compile takes inside the block, one entry per broken frame.

    torch's ``counters["graph_break"]`` leaves out a break it cannot resume from (a break
    under a context manager it cannot split, where it compiles up to the last resumable point
    and runs the rest of the frame eagerly), so it undercounts against Strata's records, which
    hold one break per frame that broke. torch logs every break to its ``graph_breaks``
    artifact logger, resumable or not: this counts those records, silently (the logger is
    enabled with our handler only, for the block).
    """
    from torch._dynamo import symbolic_convert

    logger = symbolic_convert.graph_break_log
    handler = _BreakLog()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler.reasons
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def run_torch(case: Case, backend: str = "eager") -> Outcome:
    """The case under ``torch.compile(model, backend=<counting backend>)``: the reference.

    Breaks are counted from torch's break log (``counting_torch_breaks``), as Strata's are
    from its frame records: one per frame that broke.
    """
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    counting = _Counting(torch._dynamo.lookup_backend(backend))
    dynamic = True if case.mode == "dynamic" else None
    built = case.model.build()
    start = time.perf_counter()
    try:
        with counting_torch_breaks() as reasons:
            tensors = run_case(
                case, built, lambda m: torch.compile(m, backend=counting, dynamic=dynamic)
            )
        seconds = time.perf_counter() - start
        compiles = counters["frames"]["ok"]
        return Outcome(tensors, len(counting.graphs), len(reasons), reasons, seconds, compiles)
    finally:
        torch._dynamo.reset()
        counters.clear()
