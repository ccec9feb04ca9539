"""Splitting a joint forward+backward graph into a forward graph and a backward graph.

A partitioner takes the joint graph (placeholders `primals_*` then `tangents_*`; outputs: the
`num_fwd_outputs` forward outputs, then the input gradients) and returns

* a forward graph: primals -> (forward outputs..., saved values...)
* a backward graph: (saved values..., tangents...) -> input gradients.

`default_partition` saves every forward value the backward reads. `min_cut_partition` picks the
saved set by a minimum cut weighted by bytes and recomputes cheap ops in the backward instead.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import torch
import torch.fx

from aot.errors import PartitionError
from aot.rng_replay import RNG_REPLAY_OPS

__all__ = [
    "PartitionStats",
    "cpu_partition",
    "default_partition",
    "is_recomputable",
    "min_cut_partition",
    "node_bytes",
    "partition_stats",
]

log = logging.getLogger("strata.aot")

_INF = math.inf


def node_bytes(node: torch.fx.Node) -> int:
    """Bytes of the tensor value a node produces (0 for non-tensors, sum over tuples)."""
    return _value_bytes(node.meta.get("val"))


def _hint(n: object) -> int:
    """A concrete value for a possibly symbolic int, without adding a guard."""
    if isinstance(n, torch.SymInt):
        hint = n.node.hint
        return int(hint) if hint is not None else 4096
    assert isinstance(n, int)
    return n


def _value_bytes(val: object) -> int:
    if isinstance(val, torch.Tensor):
        return _hint(val.numel()) * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(_value_bytes(v) for v in val)
    return 0


# View-like and copy ops that are as cheap to recompute as a pointwise op (in a fused kernel they
# are index arithmetic); functionalization turns every view into one of these `*_copy` forms.
_CHEAP_NAMES = frozenset(
    {
        "view_copy", "_unsafe_view", "t_copy", "transpose_copy", "permute_copy", "expand_copy",
        "unsqueeze_copy", "squeeze_copy", "slice_copy", "select_copy", "as_strided_copy",
        "alias_copy", "detach_copy", "clone", "_to_copy", "view", "reshape", "t", "transpose",
        "permute", "expand", "unsqueeze", "squeeze", "slice", "select",
        "full", "zeros", "ones", "scalar_tensor", "full_like", "zeros_like", "ones_like",
        "arange", "iota",
    }
)


def is_recomputable(node: torch.fx.Node) -> bool:
    """Whether min-cut may recompute this node in the backward.

    Cheap, fusible ops only: pointwise ops and view/copy-like ops. Never random ops (a recomputed
    dropout mask would differ from the forward's), matmuls, convolutions, reductions or anything
    else whose cost is not a memory pass.
    """
    if node.op != "call_function":
        return False
    target = node.target
    if target is getattr:
        return False
    if target.__module__ == "_operator" and getattr(target, "__name__", "") == "getitem":
        return False
    tags = getattr(target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags or target in RNG_REPLAY_OPS:
        return False
    if torch.Tag.pointwise in tags:
        return True
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    return name in _CHEAP_NAMES


@attrs.frozen
class _JointParts:
    """The joint graph's pieces, classified."""

    primals: tuple[torch.fx.Node, ...]
    tangents: tuple[torch.fx.Node, ...]
    fwd_outputs: tuple[torch.fx.Node | None, ...]
    bwd_outputs: tuple[torch.fx.Node | None, ...]
    forward_nodes: frozenset[torch.fx.Node]  # needed by the forward outputs or effects
    tangent_free: frozenset[torch.fx.Node]  # nodes that do not depend on any tangent
    # forward ops kept for their effect though nothing reads their value: a random op whose
    # result is unused still advances the generator, so later draws match eager's
    fwd_effects: tuple[torch.fx.Node, ...] = ()


def _ancestors(
    roots: Iterable[torch.fx.Node], stop: frozenset[torch.fx.Node]
) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in stop:
            continue
        stack.extend(n.all_input_nodes)
    return seen


def _is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem"


def _classify(joint_gm: torch.fx.GraphModule, num_fwd_outputs: int) -> _JointParts:
    nodes = list(joint_gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    tangents = tuple(n for n in placeholders if n.name.startswith("tangents"))
    primals = tuple(n for n in placeholders if n not in tangents)
    out = nodes[-1]
    if out.op != "output":
        raise PartitionError("the joint graph has no output node")
    outputs = tuple(out.args[0])
    fwd_outputs, bwd_outputs = outputs[:num_fwd_outputs], outputs[num_fwd_outputs:]
    tangent_dependent: set[torch.fx.Node] = set(tangents)
    for n in nodes:
        if any(a in tangent_dependent for a in n.all_input_nodes):
            tangent_dependent.add(n)
    fwd_effects = tuple(
        n for n in nodes
        if n.op == "call_function" and n not in tangent_dependent and n.is_impure()
    )
    forward_nodes = _ancestors(
        [*(o for o in fwd_outputs if isinstance(o, torch.fx.Node)), *fwd_effects], frozenset()
    )
    bad = forward_nodes & tangent_dependent
    if bad:
        raise PartitionError(f"forward outputs depend on tangents: {sorted(n.name for n in bad)}")
    # A tuple-producing forward op is never saved whole: its getitems join the forward.
    for n in nodes:
        if _is_getitem(n) and n.args[0] in forward_nodes:
            forward_nodes.add(n)
    tangent_free = frozenset(n for n in nodes if n.op != "output" and n not in tangent_dependent)
    return _JointParts(primals, tangents, fwd_outputs, bwd_outputs, frozenset(forward_nodes),
                       tangent_free, fwd_effects)


def _build(
    joint_gm: torch.fx.GraphModule,
    inputs: Sequence[torch.fx.Node],
    outputs: Sequence[torch.fx.Node | None],
    name: str,
    effects: Sequence[torch.fx.Node] = (),
) -> torch.fx.GraphModule:
    """A new graph computing `outputs` from `inputs`, copying the joint's nodes in between
    (in the joint's order), and running `effects` though nothing reads them."""
    needed = _ancestors([*(o for o in outputs if o is not None), *effects], frozenset(inputs))
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for p in inputs:
        env[p] = graph.placeholder(p.name)
        env[p].meta = dict(p.meta)
    for n in joint_gm.graph.nodes:
        if n in env or n not in needed:
            continue
        if n.op == "placeholder":
            raise PartitionError(f"{name} graph needs {n.name}, which is not one of its inputs")
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] if o is not None else None for o in outputs))
    graph.eliminate_dead_code()
    gm = torch.fx.GraphModule(joint_gm, graph, class_name=name)
    return gm


def _own_bytes(node: torch.fx.Node) -> int:
    """Bytes a node allocates: none for a view (a `*_copy` of a view runs as the view) or a
    tuple element (its producer counted it)."""
    if node.op == "placeholder":
        return node_bytes(node)
    if _is_getitem(node) or _view_name(node) in _VIEW_COPIES:
        return 0
    return node_bytes(node)


def _view_name(node: torch.fx.Node) -> str:
    if node.op != "call_function":
        return ""
    return str(getattr(getattr(node.target, "overloadpacket", None), "__name__", ""))


def _order_backward(gm: torch.fx.GraphModule) -> None:
    """Reorder a backward graph to keep fewer bytes alive at once.

    The joint graph lists the forward first, so a backward copied in its order recomputes
    every forward value up front: a layer norm's output that only the last weight gradient
    reads was computed before the first matmul and held through the whole backward, on top of
    the saved values. Here a node that does not depend on a tangent (a recomputed value, a
    view of a saved one) is placed just before the first node that needs it, and among the
    tangent-dependent nodes ready to run the next one is the one whose run (with the
    recomputation it pulls in) adds the fewest bytes net of the values it reads last -- a
    weight gradient that consumes a recomputed activation runs before an input gradient that
    allocates a new one. Ties keep the traced order. Values die at their last reader (the
    compiled backward frees its inputs as it goes); a view keeps its base alive.
    """
    graph = gm.graph
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if not placeholders or nodes[-1].op != "output":
        return
    output = nodes[-1]
    index = {n: k for k, n in enumerate(nodes)}
    dependent = {n for n in placeholders if n.name.startswith("tangents")}
    impure: list[torch.fx.Node] = []
    for n in nodes:
        if n.op == "call_function" and n.is_impure():
            impure.append(n)
        if n.op != "placeholder" and any(a in dependent for a in n.all_input_nodes):
            dependent.add(n)
    # effects keep their order: each impure node waits for the one before it
    extra = {b: a for a, b in itertools.pairwise(impure)}

    def inputs(n: torch.fx.Node) -> list[torch.fx.Node]:
        found = list(dict.fromkeys(n.all_input_nodes))
        if n in extra:
            found.append(extra[n])
        return found

    root: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in nodes:
        first = n.args[0] if n.args else None
        aliasing = _is_getitem(n) or _view_name(n) in _VIEW_COPIES
        root[n] = root[first] if aliasing and isinstance(first, torch.fx.Node) else n
    readers: dict[torch.fx.Node, int] = {}
    for n in nodes:
        for r in {root[a] for a in inputs(n)}:
            readers[r] = readers.get(r, 0) + 1
    placed: set[torch.fx.Node] = set(placeholders)
    order: list[torch.fx.Node] = []

    def missing(n: torch.fx.Node) -> list[torch.fx.Node]:
        """The unplaced tangent-free nodes ``n`` needs, in an order they can run in."""
        seen: set[torch.fx.Node] = set()
        out: list[torch.fx.Node] = []
        stack: list[tuple[torch.fx.Node, bool]] = [
            (a, False) for a in reversed(inputs(n)) if a not in placed
        ]
        while stack:
            m, expanded = stack.pop()
            if expanded:
                out.append(m)
                continue
            if m in seen or m in placed:
                continue
            seen.add(m)
            stack.append((m, True))
            stack.extend((a, False) for a in reversed(inputs(m)) if a not in placed)
        return out

    def cost(n: torch.fx.Node) -> int:
        run = [*missing(n), n]
        added = sum(_own_bytes(m) for m in run)
        reads: dict[torch.fx.Node, int] = {}
        for m in run:
            for r in {root[a] for a in inputs(m)}:
                reads[r] = reads.get(r, 0) + 1
        freed = sum(_own_bytes(r) for r, k in reads.items() if readers[r] == k)
        return added - freed

    def place(n: torch.fx.Node) -> None:
        for m in [*missing(n), n]:
            placed.add(m)
            order.append(m)
            for r in {root[a] for a in inputs(m)}:
                readers[r] -= 1

    waiting = {n: sum(1 for a in inputs(n) if a in dependent and a not in placed)
               for n in nodes if n in dependent and n.op not in ("placeholder", "output")}
    successors: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for n in waiting:
        for a in inputs(n):
            successors.setdefault(a, []).append(n)
    ready = [n for n, k in waiting.items() if k == 0]
    while ready:
        best = min(ready, key=lambda n: (cost(n), index[n]))
        ready.remove(best)
        place(best)
        for user in successors.get(best, ()):
            if user in waiting:
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
    place(output)  # and whatever only the output reads
    if len(order) != len(nodes) - len(placeholders):
        return  # something was left out (cannot happen in a graph fx accepts): keep it as is
    anchor = placeholders[-1]
    for n in order:
        if n.op != "output":
            anchor.append(n)
            anchor = n
    graph.lint()
    gm.recompile()


def _split(
    joint_gm: torch.fx.GraphModule, parts: _JointParts, saved: Sequence[torch.fx.Node]
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    fw = _build(joint_gm, parts.primals, [*parts.fwd_outputs, *saved], "ForwardGraph",
                parts.fwd_effects)
    bw = _build(joint_gm, [*saved, *parts.tangents], parts.bwd_outputs, "BackwardGraph")
    _order_backward(bw)
    log.debug("saved for backward: %s", [n.name for n in saved])
    return fw, bw


def _in_order(joint_gm: torch.fx.GraphModule, chosen: set[torch.fx.Node]) -> list[torch.fx.Node]:
    return [n for n in joint_gm.graph.nodes if n in chosen]


def default_partition(
    joint_gm: torch.fx.GraphModule, joint_inputs: Sequence[object], *, num_fwd_outputs: int
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """Save every forward value that the backward uses; recompute nothing but views of inputs.

    The forward graph computes what the forward outputs need; everything else (which depends on
    tangents or is used only by the backward) runs in the backward graph. A saved value that is
    only a view of a graph input (a transposed weight) is saved as that input, as eager does.
    """
    del joint_inputs  # the graph's node metadata carries the example values
    parts = _classify(joint_gm, num_fwd_outputs)
    fwd = parts.forward_nodes | set(parts.primals)
    bwd_needed = _ancestors([o for o in parts.bwd_outputs if o is not None],
                            frozenset(fwd) | frozenset(parts.tangents))
    frontier = _past_checkpointed([n for n in bwd_needed if n in fwd])
    saved = {_view_root(n) for n in frontier if _is_saveable(n)}
    return _split(joint_gm, parts, _in_order(joint_gm, saved))


def _checkpointed(node: torch.fx.Node) -> bool:
    """Whether activation checkpointing tagged ``node`` to be recomputed in the backward (the
    ops of a ``checkpoint``ed function, traced through torch's tag_activation_checkpoint)."""
    policy = node.meta.get("recompute")
    return node.op == "call_function" and policy is not None and "RECOMPUTE" in str(policy)


def _past_checkpointed(nodes: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    """``nodes`` with each checkpointed one replaced by the nearest untagged values it is
    computed from: those are saved, and the backward recomputes the rest."""
    found: set[torch.fx.Node] = set()
    seen: set[torch.fx.Node] = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if _checkpointed(n):
            stack.extend(n.all_input_nodes)
        else:
            found.add(n)
    return found


_VIEW_COPIES = frozenset(
    {
        "view_copy", "_unsafe_view", "t_copy", "transpose_copy", "permute_copy", "expand_copy",
        "unsqueeze_copy", "squeeze_copy", "slice_copy", "select_copy", "alias_copy",
        "detach_copy",
    }
)


def _view_root(node: torch.fx.Node) -> torch.fx.Node:
    """The graph input `node` is a chain of view copies of, else `node` itself.

    In eager such a value is a view: it costs no memory of its own, and the backward gets it from
    the input it already holds. The default partition does the same: it saves the input and
    leaves the view ops to the backward.
    """
    cur = node
    while cur.op == "call_function":
        name = getattr(getattr(cur.target, "overloadpacket", None), "__name__", "")
        if name not in _VIEW_COPIES or not isinstance(cur.args[0], torch.fx.Node):
            return node
        cur = cur.args[0]
    return cur if cur.op == "placeholder" else node


def _is_saveable(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return not isinstance(val, (list, tuple))


def min_cut_partition(
    joint_gm: torch.fx.GraphModule, joint_inputs: Sequence[object], *, num_fwd_outputs: int
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """Choose the saved values by a max-flow min-cut weighted by bytes; recompute the rest.

    Every tangent-free node n becomes an edge n_in -> n_out whose capacity is the bytes of its
    value (infinite for tuple values, which cannot be saved whole). Producer-to-consumer edges
    n_out -> m_in are infinite. Primals and forward nodes that must not be recomputed (random,
    matmul/conv, reductions: see `is_recomputable`) hang off the source; every node read by a
    tangent-dependent node or returned as a gradient feeds the sink. A minimum cut then crosses
    only n_in -> n_out edges: those n are saved, and every node on the sink side that the backward
    needs is recomputed there from saved values.
    """
    del joint_inputs
    parts = _classify(joint_gm, num_fwd_outputs)

    def capacity(n: torch.fx.Node) -> float:
        # The +1 breaks ties toward saving a graph input over an equally large copy of it.
        saveable = _is_saveable(n) and not _checkpointed(n)  # checkpointed: recomputed
        return node_bytes(n) + (n.op != "placeholder") if saveable else _INF

    def pinned(n: torch.fx.Node) -> bool:
        return n.op == "placeholder" or (
            n in parts.forward_nodes and not is_recomputable(n) and not _checkpointed(n)
        )

    saved = _min_cut(parts, capacity, pinned)
    if saved is None:
        return default_partition(joint_gm, (), num_fwd_outputs=num_fwd_outputs)
    return _split(joint_gm, parts, _in_order(joint_gm, saved))


def _min_cut(
    parts: _JointParts,
    capacity: Callable[[torch.fx.Node], float],
    pinned: Callable[[torch.fx.Node], bool],
) -> set[torch.fx.Node] | None:
    """The tangent-free nodes a minimum cut saves (see `min_cut_partition`), or None when no
    finite cut exists."""
    # networkx loads in about half a second: imported here, inference never pays for it
    import networkx as nx

    candidates = parts.tangent_free
    g = nx.DiGraph()
    g.add_node("source")
    g.add_node("sink")
    bwd_outputs = {o for o in parts.bwd_outputs if o is not None}
    for n in candidates:
        g.add_edge(f"{n.name}_in", f"{n.name}_out", capacity=capacity(n))
        if pinned(n):
            g.add_edge("source", f"{n.name}_in", capacity=_INF)
        for user in n.users:
            if user in candidates:
                g.add_edge(f"{n.name}_out", f"{user.name}_in", capacity=_INF)
            elif user.op != "output":
                g.add_edge(f"{n.name}_out", "sink", capacity=_INF)
        if n in bwd_outputs:
            g.add_edge(f"{n.name}_out", "sink", capacity=_INF)
    try:
        cut_value, (reachable, _) = nx.minimum_cut(g, "source", "sink")
    except nx.NetworkXUnbounded:
        cut_value = _INF
    if cut_value == _INF:
        log.warning("min-cut found no finite cut; falling back to the default partition")
        return None
    return {
        n for n in candidates
        if f"{n.name}_in" in reachable and f"{n.name}_out" not in reachable
    }


# Ops a fusing compiler reads its inputs inside a kernel for (index arithmetic and loads): a
# value only such ops read in the backward need not exist in memory there. Anything else (a
# matmul, an attention or embedding backward, a scatter) reads a materialized tensor.
_FUSIBLE_READERS = _CHEAP_NAMES | {
    "sum", "mean", "amax", "amin", "var", "var_mean", "prod", "max", "min", "cat", "gather",
    "index_select", "embedding", "slice_scatter", "where", "masked_fill", "copy",
    "split_copy", "split_with_sizes_copy", "unbind_copy",
}  # fmt: skip


# Functional forms of the views that return several tensors: their pieces are views too.
_SPLITTING_VIEWS = frozenset({"split_copy", "split_with_sizes_copy", "unbind_copy"})


def _is_view(node: torch.fx.Node) -> bool:
    """A view copy, or a piece of a splitting one (a compiler may hand either out as a view
    or as a copy: saving its base leaves no doubt about the layout the backward gets)."""
    if _view_name(node) in _VIEW_COPIES:
        return True
    base = node.args[0] if _is_getitem(node) else None
    return isinstance(base, torch.fx.Node) and _view_name(base) in _SPLITTING_VIEWS


def _reads_fused(node: torch.fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and (
        torch.Tag.pointwise in tags or _view_name(node) in _FUSIBLE_READERS
    )


def _materialized_in_backward(node: torch.fx.Node, forward: frozenset[torch.fx.Node]) -> bool:
    """Whether a backward op that does not fuse its reads (a matmul, an attention backward)
    reads ``node``, directly or through views: recomputing it there would cost a kernel and a
    buffer of its own, the very things saving it costs, and the forward's work again."""
    stack, seen = [node], {node}
    while stack:
        cur = stack.pop()
        for user in cur.users:
            if user in seen or user.op == "output":
                continue
            if _is_view(user) or _view_name(user) in _SPLITTING_VIEWS:
                seen.add(user)
                stack.append(user)
            elif user not in forward and not _reads_fused(user):
                return True
    return False


def cpu_partition(
    joint_gm: torch.fx.GraphModule, joint_inputs: Sequence[object], *, num_fwd_outputs: int
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The min-cut of `min_cut_partition`, restricted so that the backward recomputes only what
    fuses into its kernels: for a compiler whose per-tensor costs (an allocation in the forward,
    an argument to unpack in the backward) weigh as much as the bytes, as on a CPU.

    * A view is never saved unless it is a view of a graph input: its base is, and the backward
      rebuilds the view (no memory, no kernel).
    * A value an unfused backward op reads (a matmul's operand, an attention backward's query)
      is never recomputed: the backward would materialize it again.
    * Each saved value costs its bytes plus `_PER_TENSOR` bytes, and a fusible value every
      reader of which fuses costs its bytes twice: saving it makes the forward write what it
      could have kept in registers (a matmul's result is in memory anyway). Matmuls,
      reductions and random ops are never recomputed.
    """
    del joint_inputs
    parts = _classify(joint_gm, num_fwd_outputs)
    forward = parts.forward_nodes

    def capacity(n: torch.fx.Node) -> float:
        if not _is_saveable(n) or _checkpointed(n):
            return _INF
        if n.op == "placeholder":
            return node_bytes(n)
        if _is_view(n):
            return _INF
        # a matmul's result, or a value some reader needs in memory, is written anyway
        fused = _reads_fused(n) and all(_reads_fused(u) for u in n.users if u.op != "output")
        return node_bytes(n) * (2 if fused else 1) + _PER_TENSOR

    def pinned(n: torch.fx.Node) -> bool:
        if n.op == "placeholder":
            return True
        if n not in forward or _checkpointed(n) or _is_view(n):
            return False
        if _view_name(n) in _SPLITTING_VIEWS:
            return False
        return not is_recomputable(n) or _materialized_in_backward(n, forward)

    saved = _min_cut(parts, capacity, pinned)
    if saved is None:
        return default_partition(joint_gm, (), num_fwd_outputs=num_fwd_outputs)
    return _split(joint_gm, parts, _in_order(joint_gm, saved))


# What one saved tensor costs beyond its bytes, in bytes (an allocation, a handle to unpack).
_PER_TENSOR = 8192


@attrs.frozen
class PartitionStats:
    """What a forward graph hands to its backward graph."""

    num_saved: int
    saved_bytes: int
    saved_names: tuple[str, ...]


def partition_stats(fw_gm: torch.fx.GraphModule, num_fwd_outputs: int) -> PartitionStats:
    """Count the values a forward graph saves for the backward (its outputs past the first n)."""
    out = next(n for n in reversed(fw_gm.graph.nodes) if n.op == "output")
    saved: list[Any] = list(out.args[0])[num_fwd_outputs:]
    nodes = [s for s in saved if isinstance(s, torch.fx.Node)]
    return PartitionStats(
        num_saved=len(nodes),
        saved_bytes=sum(node_bytes(s) for s in nodes),
        saved_names=tuple(s.name for s in nodes),
    )
