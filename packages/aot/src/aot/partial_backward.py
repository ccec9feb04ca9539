"""A backward through only some outputs of a compiled region, as eager's per-op nodes run it.

A compiled region is one autograd node, eager has one per op. A backward through some of the
region's outputs (``loss.backward()`` inside the function, its other outputs backpropagated
later) frees every saved value of the one node, where eager frees only the buffers of the ops
that backward ran: a later backward through the other outputs then raised "backward through
the graph a second time" where eager does not; and an input that only the other outputs reach
got a zero gradient where eager leaves ``.grad`` None.

So the backward graph is read with the absent gradients as structural zeros: an op that is
linear in an argument that is zero is zero (a product with it, a view, a sum, an aten
``*_backward`` formula of a zero output gradient) and reads nothing; an additive op passes its
other arguments through. What the live part of the graph reads is what eager's executed nodes
read: the region keeps the other saved values (as eager's unexecuted nodes keep theirs) and a
later backward that needs only those runs the graph again from them (``run``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

__all__ = ["FREED_MESSAGE", "Plan", "plan", "run", "saved_readers", "shapes_of"]

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)

# zero when any tensor argument is zero (products)
_PRODUCTS = frozenset({"mul", "mm", "bmm", "matmul", "dot", "mv", "outer"})
# zero when the first argument is zero (linear in it: views, reductions, casts, a division)
_LINEAR_FIRST = frozenset({
    "neg", "view", "reshape", "_unsafe_view", "expand", "permute", "t", "transpose", "squeeze",
    "unsqueeze", "slice", "select", "clone", "contiguous", "alias", "sum", "mean", "_to_copy",
    "div", "as_strided", "flip", "roll", "repeat", "detach", "index_select", "gather", "tril",
    "triu", "diagonal",
})
# zero when all tensor arguments are zero (sums: the others pass through)
_SUMS = frozenset({"add", "sub", "cat", "stack"})


def _op_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    name = str(getattr(packet, "__name__", "")) if packet is not None else ""
    return name[: -len("_copy")] if name.endswith("_copy") else name


def _tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, torch.fx.Node))
    return found


_ZERO_FILLS = frozenset({"zeros", "zeros_like", "new_zeros"})
_FILLS = {"scalar_tensor": 0, "full": 1, "full_like": 1, "new_full": 2}


def _constant_zero(node: torch.fx.Node) -> bool:
    """A tensor of zeros made by the graph (a gradient formula's ``where(c, g, 0)``)."""
    name = _op_name(node.target)
    if name in _ZERO_FILLS:
        return True
    at = _FILLS.get(name)
    if at is None or len(node.args) <= at:
        return False
    value = node.args[at]
    return isinstance(value, (int, float, bool)) and not isinstance(value, torch.fx.Node) and (
        value == 0
    )


def _is_zero(node: torch.fx.Node, zero: set[torch.fx.Node]) -> bool:
    if node.op != "call_function":
        return False
    if _constant_zero(node):
        return True
    args = _tensor_args(node)
    if not args:
        return False
    if node.target is operator.getitem:
        return node.args[0] in zero
    name = _op_name(node.target)
    first = node.args[0] if node.args else None
    if name in _PRODUCTS:
        return any(a in zero for a in args)
    if name in _LINEAR_FIRST or name.endswith("_backward") or name.endswith("_backward_data"):
        # aten's gradient formulas take the output gradient first and are linear in it
        return isinstance(first, torch.fx.Node) and first in zero
    if name == "where":
        return all(
            a in zero if isinstance(a, torch.fx.Node) else isinstance(a, (int, float)) and a == 0
            for a in node.args[1:3]
        )
    if name in _SUMS:
        return all(a in zero for a in args)
    return False


@dataclass(frozen=True)
class Plan:
    """The backward graph with some output gradients absent."""

    zero: frozenset[torch.fx.Node]  # nodes that are structurally zero
    live: tuple[torch.fx.Node, ...]  # the call nodes to run, in graph order
    zero_grads: frozenset[int]  # input gradients (output positions) that are zero: None
    live_set: frozenset[torch.fx.Node]  # the same nodes as ``live``


def plan(bw_gm: torch.fx.GraphModule, num_saved: int, absent: frozenset[int]) -> Plan:
    """What a backward with the output gradients ``absent`` (tangent positions) runs."""
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    zero: set[torch.fx.Node] = {placeholders[num_saved + j] for j in absent}
    for node in bw_gm.graph.nodes:
        if _is_zero(node, zero):
            zero.add(node)
    out = next(n for n in reversed(bw_gm.graph.nodes) if n.op == "output")
    grads = list(out.args[0])
    # eager leaves an input's gradient None when no node on a path from a given output
    # gradient reaches it (a product with a zero fill on such a path still gives zeros)
    reached: set[torch.fx.Node] = {
        p for j, p in enumerate(placeholders[num_saved:]) if j not in absent
    }
    for node in bw_gm.graph.nodes:
        if node.op == "call_function" and any(a in reached for a in node.all_input_nodes):
            reached.add(node)
    zero_grads = frozenset(
        i for i, g in enumerate(grads) if isinstance(g, torch.fx.Node) and g not in reached
    )
    needed: set[torch.fx.Node] = set()
    stack = [g for g in grads if isinstance(g, torch.fx.Node) and g not in zero]
    while stack:
        n = stack.pop()
        if n in needed or n in zero:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)
    live = tuple(n for n in bw_gm.graph.nodes if n in needed and n.op == "call_function")
    return Plan(frozenset(zero), live, zero_grads, frozenset(live))


def saved_readers(bw_gm: torch.fx.GraphModule, num_saved: int) -> list[frozenset[torch.fx.Node]]:
    """The nodes that read each saved value. Eager's nodes save their own copy of a value
    they share: one freed by a backward that ran it stays saved for the others."""
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"][:num_saved]
    return [frozenset(p.users) for p in placeholders]


def _meta(value: Any) -> Any:
    if isinstance(value, tuple):  # (shape, stride, dtype) of a tensor: shape_of
        shape, stride, dtype = value
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    return value


class _Env:
    """Values of the live nodes; meta values (shapes) of the zero ones, made when a live node
    adds a zero to something."""

    def __init__(self, gm: torch.fx.GraphModule, inputs: Sequence[Any], metas: Sequence[Any],
                 *, zero: frozenset[torch.fx.Node], device: torch.device, num_saved: int) -> None:
        self.num_saved = num_saved
        self.placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes
                                                       if n.op == "placeholder")}
        self.inputs, self.metas, self.zero, self.device = inputs, metas, zero, device
        self.values: dict[torch.fx.Node, Any] = {}
        self.meta_values: dict[torch.fx.Node, Any] = {}

    def meta_of(self, node: torch.fx.Node) -> Any:
        if node in self.placeholders:
            return _meta(self.metas[self.placeholders[node]])
        if node not in self.meta_values:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), self.meta_of)
            self.meta_values[node] = node.target(*args, **kwargs)  # type: ignore[operator]
        return self.meta_values[node]

    def value(self, node: torch.fx.Node) -> Any:
        if node in self.zero:
            meta = self.meta_of(node)
            return torch.zeros(meta.shape, dtype=meta.dtype, device=self.device)
        if node in self.placeholders:
            got = self.inputs[self.placeholders[node]]
            if got is None:
                raise RuntimeError(FREED_MESSAGE)
            return got
        return self.values[node]


def run(
    bw_gm: torch.fx.GraphModule,
    the_plan: Plan,
    inputs: Sequence[Any],
    metas: Sequence[Any],
    *,
    num_saved: int,
    device: torch.device,
    executed: frozenset[torch.fx.Node],
) -> list[Any]:
    """The input gradients: ``inputs`` are the saved values (None where freed) then the output
    gradients (None where absent); ``metas`` the same values' shapes (``shapes_of``). Raises
    eager's error where a live node that an earlier backward ran (its saved values freed)
    reads a saved value."""
    env = _Env(bw_gm, inputs, metas, zero=the_plan.zero, device=device, num_saved=num_saved)
    for node in the_plan.live:
        if node in executed and any(
            n in env.placeholders and env.placeholders[n] < env.num_saved
            for n in node.all_input_nodes
        ):
            raise RuntimeError(FREED_MESSAGE)
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.value)
        env.values[node] = node.target(*args, **kwargs)  # type: ignore[operator]
    out = next(n for n in reversed(bw_gm.graph.nodes) if n.op == "output")
    return [
        None if i in the_plan.zero_grads or not isinstance(g, torch.fx.Node) else env.value(g)
        for i, g in enumerate(out.args[0])
    ]


def shapes_of(values: Sequence[Any]) -> list[Any]:
    """What ``run`` needs to know of ``values`` once they are freed: a tensor's (shape, stride,
    dtype); other values as they are."""
    return [
        (v.shape, v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v for v in values
    ]


def static_shapes(bw_gm: torch.fx.GraphModule, num_saved: int) -> list[Any] | None:
    """``shapes_of`` the saved values, read once from the graph's metadata when every saved
    value is a tensor of static sizes (the same on every call): a backward through some of the
    outputs (every step of a ``loss, logits`` model) then reads no shape per call (~1 us per
    saved tensor, ~80 of them in a small transformer). None otherwise."""
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"][:num_saved]
    out = []
    for p in placeholders:
        val = p.meta.get("val")
        if not isinstance(val, torch.Tensor) or not all(
            type(s) is int for s in (*val.shape, *val.stride())
        ):
            return None
        out.append((val.shape, val.stride(), val.dtype))
    return out
