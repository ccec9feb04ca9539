"""explain(fn)(*args): what Strata captures from a function, and where and why it breaks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from .api import _context, _wrap, reset
from .state import FrameRecord

__all__ = ["ExplainOutput", "explain"]


def _op_count(gm: torch.fx.GraphModule) -> int:
    return sum(
        1 for node in gm.graph.nodes if node.op in {"call_function", "call_method", "call_module"}
    )


@attrs.define
class ExplainOutput:
    """The graphs one run produced, the breaks between them and the reasons."""

    graphs: list[torch.fx.GraphModule]
    graph_count: int
    graph_break_count: int
    break_reasons: list[Any]  # objects with reason, filename, lineno, source_line
    op_count: int
    ops_per_graph: list[list[str]]
    out_guards: list[str]
    compile_times: dict[str, float]

    def __str__(self) -> str:
        lines = [
            f"Strata produced {self.graph_count} graph{'s' if self.graph_count != 1 else ''}, "
            f"with {self.graph_break_count} "
            f"graph break{'s' if self.graph_break_count != 1 else ''} "
            f"and {self.op_count} op{'s' if self.op_count != 1 else ''}."
        ]
        if self.break_reasons:
            lines.append(" Break reasons:")
            for i, brk in enumerate(self.break_reasons, 1):
                lines.append("")
                lines.append(f"{i}. {brk.reason}")
                lines.append(f'   File "{brk.filename}", line {brk.lineno}')
                if brk.source_line:
                    lines.append(f"    {brk.source_line.strip()}")
        if self.ops_per_graph:
            lines.append("")
            lines.append(" Ops per graph:")
            for i, ops in enumerate(self.ops_per_graph, 1):
                lines.append(f"   Graph {i}: {', '.join(ops) if ops else '(no ops)'}")
        return "\n".join(lines)


def _op_names(gm: torch.fx.GraphModule) -> list[str]:
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            names.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op in {"call_method", "call_module"}:
            names.append(str(node.target))
    return names


def explain(
    fn: Callable[..., Any], *extra_args: Any, **extra_kwargs: Any
) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs)`` runs ``fn`` once under Strata and reports what was captured.

    Like TorchDynamo's explain, it resets every compile cache before and after the run.
    """
    if extra_args or extra_kwargs:
        raise TypeError("use explain(fn)(*args, **kwargs): arguments go to the returned callable")

    def inner(*args: Any, **kwargs: Any) -> ExplainOutput:
        reset()
        records: list[FrameRecord] = []

        def record_graphs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            del example_inputs
            return gm.forward

        ctx = _context(record_graphs, fullgraph=False, dynamic=None, on_record=records.append)
        try:
            _wrap(fn, ctx)(*args, **kwargs)
        finally:
            reset()
        graphs = [g.gm for r in records for g in r.graphs]
        breaks = [b for r in records for b in r.breaks]
        times: dict[str, float] = {}
        for r in records:
            for phase, seconds in r.times.items():
                times[phase] = times.get(phase, 0.0) + seconds
        return ExplainOutput(
            graphs=graphs,
            graph_count=len(graphs),
            graph_break_count=len(breaks),
            break_reasons=breaks,
            op_count=sum(_op_count(g) for g in graphs),
            ops_per_graph=[_op_names(g) for g in graphs],
            out_guards=[r.guards_text for r in records if r.guards_text],
            compile_times=times,
        )

    return inner
