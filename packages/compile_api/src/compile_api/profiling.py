"""CompileProfiler (a recording backend) and compile_times() (time per compile phase)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from .state import state

__all__ = ["CompileProfiler", "compile_times"]

PHASES = ("bytecode_analysis", "guard_building", "backend_compile")


class CompileProfiler:
    """A backend that runs graphs eagerly and records graphs, breaks and recompiles.

    ``prof = CompileProfiler(); compile(fn, backend=prof)(x); print(prof.report())``
    """

    __name__ = "CompileProfiler"

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[..., Any]:
        del example_inputs
        self.graphs.append(gm)
        return gm.forward

    def report(self) -> str:
        """Graph count, op counts, graph breaks and recompile reasons, as text."""
        with state.lock:
            records = [r for r in state.records if r.backend is self]
        ops = [sum(1 for n in g.graph.nodes if n.op.startswith("call_")) for g in self.graphs]
        lines = [
            "Strata CompileProfiler report",
            f"  frames compiled: {len(records)}",
            f"  graphs: {len(self.graphs)} (ops per graph: {ops})",
        ]
        breaks = [b for r in records for b in r.breaks]
        lines.append(f"  graph breaks: {len(breaks)}")
        lines.extend(f"    - {b.reason} ({b.filename}:{b.lineno})" for b in breaks)
        recompiles = [r for r in records if r.recompile_reasons]
        lines.append(f"  recompiles: {len(recompiles)}")
        for r in recompiles:
            lines.append(f"    {r.where}:")
            lines.extend(f"      - {reason}" for reason in r.recompile_reasons)
        eager = [r for r in records if r.ran_eagerly]
        if eager:
            lines.append(f"  frames run eagerly: {len(eager)}")
            lines.extend(f"    - {r.where}: {r.ran_eagerly}" for r in eager)
        return "\n".join(lines)


def compile_times(repr: Literal["str", "dict"] = "str", aggregate: bool = False) -> Any:
    """Seconds spent per compile phase since the last reset().

    ``repr="dict"`` gives ``{phase: [seconds per compile, ...]}`` (or totals with aggregate=True);
    ``repr="str"`` a table with count, total and mean per phase.
    """
    with state.lock:
        times = {phase: list(state.times.get(phase, [])) for phase in PHASES}
    if repr == "dict":
        if aggregate:
            return {phase: sum(values) for phase, values in times.items()}
        return times
    if repr != "str":
        raise ValueError(f"repr must be 'str' or 'dict', got {repr!r}")
    rows = [f"{'phase':<20} {'count':>6} {'total (s)':>10} {'mean (ms)':>10}"]
    for phase, values in times.items():
        total = sum(values)
        mean_ms = 1000 * total / len(values) if values else 0.0
        rows.append(f"{phase:<20} {len(values):>6} {total:>10.4f} {mean_ms:>10.3f}")
    return "\n".join(rows)
