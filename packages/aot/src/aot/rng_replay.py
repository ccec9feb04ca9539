"""Random ops inside activation checkpointing, recomputed with the forward's random numbers.

Eager's ``checkpoint`` saves the generator state before the region and restores it for the
backward's recomputation, so a dropout there draws the forward's mask again (and leaves the
generator as it was). In the joint graph each checkpointed random op ``r = op(*args)`` becomes

    pair  = run_and_save_rng_state(op, *args)        # the forward's draw: state, then result
    state = pair[0]                                  # untagged: saved for the backward
    r     = run_with_rng_state(state, op, *args)     # tagged: recomputed like the region

(torch's rng prims). The forward draws once with ``pair`` (advancing the generator as eager
does) and replays the same numbers for its own use of ``r``; the backward recomputes ``r`` from
the saved state, which is a few kilobytes instead of the op's result. The replay restores the
generator state it found, so later random ops see eager's numbers.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

__all__ = ["RNG_REPLAY_OPS", "replay_checkpointed_random_ops"]

log = logging.getLogger("strata.aot")

# the ops this pass adds: random ops of their own, never recomputed or reordered
RNG_REPLAY_OPS = (run_and_save_rng_state, run_with_rng_state)


def _checkpointed(node: torch.fx.Node) -> bool:
    policy = node.meta.get("recompute")
    return node.op == "call_function" and policy is not None and "RECOMPUTE" in str(policy)


def _random(node: torch.fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return isinstance(node.target, torch._ops.OpOverload) and (
        torch.Tag.nondeterministic_seeded in tags
    )


def _state_example(val: Any) -> Any:
    """A fake of the generator state ``run_and_save_rng_state`` returns for ``val``'s device."""
    fakes = [v for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
    if not fakes:
        return None
    fake_mode = getattr(fakes[0], "fake_mode", None)
    device = fakes[0].device
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    return fake_mode.from_tensor(state) if fake_mode is not None else state


def replay_checkpointed_random_ops(joint_gm: torch.fx.GraphModule) -> int:
    """Rewrite each checkpointed random op of ``joint_gm`` as described above; returns how
    many. A random op outside checkpointed regions is left alone (it is never recomputed)."""
    graph = joint_gm.graph
    count = 0
    for node in list(graph.nodes):
        if not (_checkpointed(node) and _random(node)):
            continue
        state_val = _state_example(node.meta.get("val"))
        if state_val is None:
            continue
        untagged = {k: v for k, v in node.meta.items() if k not in ("recompute", "ac_graph_id")}
        with graph.inserting_before(node):
            pair = graph.call_function(
                run_and_save_rng_state, (node.target, *node.args), dict(node.kwargs)
            )
            pair.meta = {**untagged, "val": (state_val, node.meta.get("val"))}
            state = graph.call_function(operator.getitem, (pair, 0))
            state.meta = {**untagged, "val": state_val}
            replay = graph.call_function(
                run_with_rng_state, (state, node.target, *node.args), dict(node.kwargs)
            )
            replay.meta = dict(node.meta)
        node.replace_all_uses_with(replay)
        graph.erase_node(node)
        count += 1
    if count:
        graph.lint()
        joint_gm.recompile()
        log.debug("checkpointed random ops replayed from saved generator states: %d", count)
    return count
