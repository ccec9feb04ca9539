"""Compilers that run aot's graphs with plain PyTorch ops (no code generation).

aot hands compilers functional graphs: every view is a `*_copy` op, so no value aliases another.
That is what a code generator wants (a copy of a view is index arithmetic there), but run op by op
those copies cost real time and memory that eager never spends (a transposed weight is copied
for every matmul). `eager_compiler` runs each `*_copy` op as the view it stands for wherever that
cannot be observed: a graph output keeps its copy when it would otherwise alias a graph input or
another output.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

__all__ = ["eager_compiler", "identity_compiler"]

log = logging.getLogger("strata.aot")


def identity_compiler(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> torch.fx.GraphModule:
    """The compiler that runs the graph exactly as it is."""
    del example_inputs
    return gm


def _view_of(target: Any) -> Any:
    """The view op a `*_copy` op stands for (`aten.t_copy.default` -> `aten.t.default`)."""
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    if not name.endswith("_copy") or name in ("clone", "_to_copy", "lift_fresh_copy"):
        return None
    view_packet = getattr(torch.ops.aten, name[: -len("_copy")], None)
    view = getattr(view_packet, target._overloadname, None) if view_packet else None
    schema = getattr(view, "_schema", None)
    if schema is None or schema.is_mutable or not schema.returns:
        return None
    alias = schema.returns[0].alias_info
    return view if alias is not None and not alias.is_write else None


def eager_compiler(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> torch.fx.GraphModule:
    """Run the graph op by op, with `*_copy` ops executed as views where that is unobservable.

    The graph is functional, so a value and a view of it hold the same data; only outputs could
    tell the difference, so an output keeps its copy if, as a view, it would share memory with a
    graph input or with another output.
    """
    del example_inputs
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out_value = graph.graph_copy(gm.graph, env)
    root: dict[torch.fx.Node, torch.fx.Node] = {}
    copies: dict[torch.fx.Node, Any] = {}
    for node in graph.nodes:
        view = _view_of(node.target) if node.op == "call_function" else None
        src = node.args[0] if node.args else None
        if view is not None and isinstance(src, torch.fx.Node):
            copies[node] = node.target
            node.target = view
            root[node] = root.get(src, src)
        else:
            root[node] = node
    out_nodes: list[torch.fx.Node] = []
    torch.fx.node.map_arg(out_value, out_nodes.append)
    roots = [root.get(o, o) for o in out_nodes]
    for o, r in zip(out_nodes, roots, strict=True):
        if o not in copies:
            continue
        shares = r.op == "placeholder" or r in out_nodes or roots.count(r) > 1
        if shares:
            o.target = copies[o]  # keep the copy: as a view it would alias something visible
    graph.output(out_value)
    new_gm = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    log.debug("eager_compiler: %d of %d copies run as views", sum(
        1 for n in copies if n.target is not copies[n]), len(copies))
    return new_gm
