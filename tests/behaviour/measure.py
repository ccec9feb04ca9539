"""Runs one corpus case eagerly, under Strata and under torch.compile (both with a counting
eager backend), and says whether Strata matched: the same results as eager on two calls
(fresh inputs each), and no more graphs and no more broken frames than torch.compile."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from benchmarks.zoo.measure import counting_torch_breaks

from .corpus import Case

CALLS = 2
_CRASH = "Strata could not compile"


@dataclasses.dataclass
class Result:
    name: str
    same_as_eager: bool
    graphs: int
    breaks: int
    torch_graphs: int
    torch_breaks: int
    detail: str = ""

    @property
    def captured_like_torch(self) -> bool:
        # fewer broken frames is better whatever the graph count (torch may run a frame it
        # cannot trace eagerly: 0 graphs); with as many, no more graphs
        if self.breaks != self.torch_breaks:
            return self.breaks < self.torch_breaks
        # torch made no graph of a frame it did not break in: it ran (or skipped) it whole
        return self.graphs <= self.torch_graphs or self.torch_graphs == 0

    @property
    def passed(self) -> bool:
        return self.same_as_eager and self.captured_like_torch


class _Counter:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        self.graphs += 1
        return gm.forward


def _runs(fn: Callable[..., Any], case: Case) -> list[Any]:
    """Each call's (result, inputs after the call) on fresh seeded inputs."""
    out = []
    for call in range(CALLS):
        torch.manual_seed(call)
        inputs = case.inputs()
        torch.manual_seed(1000 + call)
        try:
            result: Any = fn(*inputs)
        except Exception as e:  # an error is a result to match, by type and message
            result = (type(e), str(e))
        out.append((result, inputs))
    return out


def differs(a: Any, b: Any, where: str = "result") -> str:
    """'' when ``a`` and ``b`` are the same value (tensors: dtype, shape and values), else where
    and how they differ."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{where}: {type(a).__name__} vs {type(b).__name__}"
        try:
            torch.testing.assert_close(b, a, equal_nan=True)
        except AssertionError as e:
            return f"{where}: {str(e).splitlines()[0]}"
        return ""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{where}: {type(a).__name__}[{len(a)}] vs {type(b).__name__}[{len(b)}]"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = differs(x, y, f"{where}[{i}]")
            if d:
                return d
        return ""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{where}: keys {list(a)} vs {list(b)}"
        for k in a:
            d = differs(a[k], b[k], f"{where}[{k!r}]")
            if d:
                return d
        return ""
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        fields = [f.name for f in dataclasses.fields(a)]
        return differs([getattr(a, f) for f in fields], [getattr(b, f) for f in fields], where)
    if type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__"):
        return differs(vars(a), vars(b), where)  # objects made per run: compare their state
    if a != b:
        return f"{where}: {a!r} vs {b!r}"
    return ""


def run(case: Case) -> Result:
    import torch._dynamo

    import compile_api
    from compile_api.state import state

    expected = _runs(case.fn, case)

    compile_api.reset()
    ours = _Counter()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = _runs(compile_api.compile(case.fn, backend=ours), case)
    # our compile crashing makes the frame run eagerly: right results, 0 graphs, no break
    # recorded, which would pass as torch's 0 graphs / 0 breaks
    crashes = [str(w.message) for w in seen if str(w.message).startswith(_CRASH)]
    with state.lock:
        breaks = sum(len(r.breaks) for r in state.records)
    compile_api.reset()

    torch._dynamo.reset()
    theirs = _Counter()
    with counting_torch_breaks() as reasons, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _runs(torch.compile(case.fn, backend=theirs), case)
    torch._dynamo.reset()

    detail = differs(expected, got) or (crashes[0].splitlines()[0] if crashes else "")
    return Result(case.name, not detail, ours.graphs, breaks, theirs.graphs, len(reasons), detail)
