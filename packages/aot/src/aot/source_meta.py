"""Source lines for aot's graphs: each aten node keeps the user's line of the node it came from.

A captured graph's nodes carry ``meta["stack_trace"]`` (symbolic_vm records the user's call
chain). make_fx copies the current node's meta into each node it records when node meta is
preserved, so the captured graph is run node by node (an fx Interpreter) while tracing, and the
forward's aten nodes print ``# File: model.py:14 in forward, code: ...`` as the captured graph
does. Backward nodes are recorded while autograd runs each forward op's derivative: a hook on
each autograd node makes the captured node that created it current for that time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch.fx import traceback as fx_traceback

from aot.higher_order import COND_OPS, forget_unbound_unbacked, functionalization_outside_tls

__all__ = ["SourceTracing"]


# autograd's count of the nodes it has made on this thread (each node keeps its number)
_sequence_nr: Callable[[], int] = getattr(torch.autograd, "_get_sequence_nr")  # noqa: B009


class _Recorder(torch.fx.Interpreter):
    """Runs a graph node by node with each node's meta current; notes which autograd nodes
    (by sequence number) each graph node created."""

    def __init__(self, gm: torch.fx.GraphModule, created: list[tuple[int, int, torch.fx.Node]]):
        super().__init__(gm)
        self.created = created

    def run_node(self, n: torch.fx.Node) -> Any:
        start = _sequence_nr()
        try:
            if n.op == "call_function" and n.target in COND_OPS:
                forget_unbound_unbacked()
                with functionalization_outside_tls():
                    return super().run_node(n)
            return super().run_node(n)
        finally:
            end = _sequence_nr()
            if end > start and n.meta.get("stack_trace"):
                self.created.append((start, end, n))


class _Interpreting(torch.nn.Module):
    """``gm`` as a module whose forward interprets it (so functional_call can swap its state)."""

    def __init__(self, gm: torch.fx.GraphModule, created: list[tuple[int, int, torch.fx.Node]]):
        super().__init__()
        self.gm = gm
        self._created = created

    def forward(self, *args: Any) -> Any:
        return _Recorder(self.gm, self._created).run(*args)


class SourceTracing:
    """What aot traces in place of a captured graph module, to keep its source lines.

    ``run(state, *args)`` computes what ``gm`` computes (``state``: parameters and buffers by
    name, as for ``torch.func.functional_call``); ``annotate_backward(outputs)`` is called
    before the joint trace differentiates ``outputs``.
    """

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.created: list[tuple[int, int, torch.fx.Node]] = []
        self._module = _Interpreting(gm, self.created)

    def run(self, state: dict[str, torch.Tensor], *args: object) -> Any:
        self.created.clear()
        with fx_traceback.preserve_node_meta():
            if not state:
                return self._module(*args)
            named = {f"gm.{name}": value for name, value in state.items()}
            return torch.func.functional_call(self._module, named, args)

    def annotate_backward(self, outputs: Sequence[object]) -> None:
        """Hook every autograd node behind ``outputs`` so the backward ops it records carry the
        source of the captured node that made it."""
        if not self.created:
            return
        starts = sorted(self.created, key=lambda r: r[0])

        def node_for(seq: int) -> torch.fx.Node | None:
            for start, end, node in starts:
                if start <= seq < end:
                    return node
            return None

        # Keyed by id, holding each node: the Python object of an autograd node can be freed
        # once unreferenced and its id reused by the next one visited, which then looked seen
        # (torch 2.11 stopped the walk at the softmax: backward ops kept no source line).
        seen: dict[int, object] = {}
        todo = [t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn]
        while todo:
            fn = todo.pop()
            if id(fn) in seen:
                continue
            seen[id(fn)] = fn
            todo.extend(next_fn for next_fn, _ in fn.next_functions if next_fn is not None)
            node = node_for(fn._sequence_nr())
            if node is not None:
                pre, post = _current_while_running(node)
                fn.register_prehook(pre)
                fn.register_hook(post)


def _current_while_running(
    node: torch.fx.Node,
) -> tuple[Callable[[Any], None], Callable[[Any, Any], None]]:
    """A pre-hook that makes ``node``'s meta current (node meta preserved: the backward runs
    after the forward's run() returned) and a hook that restores what was current before."""
    entered: list[contextlib.ExitStack] = []

    def pre(grad_outputs: Any) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(fx_traceback.preserve_node_meta())
        stack.enter_context(fx_traceback.set_current_meta(node))
        entered.append(stack)

    def post(grad_inputs: Any, grad_outputs: Any) -> None:
        if entered:
            entered.pop().close()

    return pre, post
