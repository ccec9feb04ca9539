"""Closing a trace's graph: its outputs, the inputs it keeps, the CapturedGraph to compile.

Both ends of a capture use it: a frame that returns (symbolic_vm.frame_capture) and one that
breaks (symbolic_vm.breaks.policy), with the outputs each one's Rebuilder asked for.
"""

from __future__ import annotations

import ast
import logging
import types

import torch

from symbolic_vm.codegen import Rebuilder
from symbolic_vm.errors import Unsupported
from symbolic_vm.guard_api import Source
from symbolic_vm.output import Output
from symbolic_vm.records import CapturedGraph, CaptureResult, GraphBreak
from symbolic_vm.values import SymVar, TensorVar

log = logging.getLogger("strata.symbolic_vm")

__all__ = ["capture_result", "close_graph"]


def close_graph(
    out: Output, rebuilder: Rebuilder, graph_name: str
) -> tuple[list[CapturedGraph], str | None, list[ast.expr], list[TensorVar | SymVar]]:
    """Close the graph: its outputs are what ``rebuilder`` asked for; drop unused inputs.

    Returns the graphs (none when nothing was captured), the global name to call, the input
    expressions, and the tensor inputs to guard.
    """
    graph = out.builder.graph
    inputs = out.graph_inputs()
    # Inputs nothing used are dropped from the graph (and guarded only if their metadata was read).
    live = [v for v in inputs if v.node.users]
    if out.side_effects and any(
        _runs_user_torch_function(out.input_value(v)) for v in live
    ):
        # The graph runs the subclass's hook at run time, all of it before the replayed
        # writes: a hook that logs to a list the frame also changes would lose its entries
        # (the list is written back whole) or see them out of order.
        raise Unsupported(
            "a tensor whose class has its own __torch_function__ (user code the graph runs) "
            "in a frame that also changes Python state: the frame runs eagerly, in order"
        )
    for var in inputs:
        if not var.node.users:
            graph.erase_node(var.node)
    # A SymInt input is always guarded (its TYPE_MATCH int at least): the trace assumed an int
    # (isinstance, a side effect storing it) even where no graph uses it.
    guarded = [
        v for v in inputs if v in live or out.used_placeholder(v) or isinstance(v, SymVar)
    ]
    # Grad-mode switches alone are no work: the transformed code replays the mode the graph
    # ends in (codegen.effect_lines), so a graph of only those (a break right inside a no_grad
    # block) is not compiled, as torch.compile compiles none.
    has_ops = any(
        n.op not in ("placeholder", "output")
        and not (n.op == "call_function" and n.target is torch._C._set_grad_enabled)
        for n in graph.nodes
    )
    if not (has_ops or rebuilder.outputs):
        return [], None, [], guarded
    gm = out.builder.finish(rebuilder.outputs)
    # Real tensors, and for a SymInt input its SymInt (as torch.compile passes them): a backend
    # that retraces (aot) must not bake the int's example value into its graph.
    example_inputs: list[object] = [
        v.example if isinstance(v, SymVar) else out.input_value(v) for v in live
    ]
    log.debug("captured %s:\n%s", graph_name, gm.code)
    args = [rebuilder.source(_source(v)) for v in live]
    sources = tuple(_source(v) for v in live)
    return [CapturedGraph(graph_name, gm, example_inputs, sources)], graph_name, args, guarded


def capture_result(
    out: Output,
    code: types.CodeType,
    closed: tuple[list[CapturedGraph], list[TensorVar | SymVar]],
    breaks: list[GraphBreak],
    resume_globals: dict[str, object] | None = None,
) -> CaptureResult:
    """The result of a capture: ``code`` to run, the graphs and guarded inputs ``closed`` (from
    :func:`close_graph`), the trace's guards, and the globals to install."""
    graphs, guarded = closed
    guards, rebuild_guards = out.capture_guards(guarded)
    return CaptureResult(
        code=code,
        graphs=graphs,
        guards=guards,
        rebuild_guards=rebuild_guards,
        breaks=breaks,
        globals_to_install=out.installs if resume_globals is None
        else {**out.installs, **resume_globals},
    )


def _runs_user_torch_function(value: object) -> bool:
    """Whether ops on ``value`` run a ``__torch_function__`` of the user's (not torch's own
    default, which only rewraps results, nor a disabled one)."""
    if not isinstance(value, torch.Tensor) or type(value) is torch.Tensor:
        return False
    hook = getattr(type(value), "__torch_function__", None)
    own = getattr(hook, "__func__", hook)
    return own is not _TENSOR_TORCH_FUNCTION and own is not _DISABLED_TORCH_FUNCTION


_TENSOR_TORCH_FUNCTION = getattr(torch.Tensor.__torch_function__, "__func__", None)
_DISABLED_TORCH_FUNCTION = torch._C._disabled_torch_function_impl




def _source(var: TensorVar | SymVar) -> Source:
    assert var.source is not None
    return var.source
