"""Training memory of the harness's transformer block step (issue #22), checked on CPU.

* What the forward saves for the backward: aot's min-cut partition (inductor_lite's route on
  CUDA) saves no more bytes than torch's own partitioner (min_cut_rematerialization_partition,
  as inductor calls it) on the same captured graph, and the gradients equal eager's.
* When the saved and recomputed values live: the generated wrappers (Triton route) run on meta
  tensors with no-op kernels (benchmarks/training_memory_sim.py); the backward, which used to
  recompute every layer norm and GELU output up front and hold them through its matmuls,
  peaks below the forward.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

pytest.importorskip("triton")

from saved_for_backward import capture, inductor_lite_table  # noqa: E402
from workloads.base import randn  # noqa: E402
from workloads.models import make_block  # noqa: E402

import aot  # noqa: E402


def _saved_bytes(fw: torch.fx.GraphModule, num_fwd_outputs: int) -> tuple[int, list[str]]:
    """Bytes of the saved values that are not graph inputs (those cost nothing of their own)."""
    out = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    total, names = 0, []
    for node in list(out.args[0])[num_fwd_outputs:]:
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and node.op != "placeholder":
            total += int(val.numel()) * val.element_size()
            names.append(node.name)
    return total, names


def _torch_saved(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> int:
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    forwards: list[torch.fx.GraphModule] = []

    def fw_compiler(g: torch.fx.GraphModule, _: Any) -> Any:
        forwards.append(g)
        return g

    aot_module_simplified(
        gm, list(inputs), fw_compiler=fw_compiler, bw_compiler=lambda g, _: g,
        partition_fn=functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
        decompositions=select_decomp_table(),
    )
    return _saved_bytes(forwards[0], 1)[0]


def test_min_cut_saves_no_more_than_torch_on_the_transformer_block_and_grads_match() -> None:
    model, x = make_block(torch.device("cpu"), False)
    target = randn(tuple(x.shape), torch.device("cpu"), 22)

    def loss_fn(inp: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(model(inp), tgt)

    gm, inputs = capture(loss_fn, (x, target))
    forwards: list[torch.fx.GraphModule] = []

    def fw_compiler(g: torch.fx.GraphModule, ex: Sequence[Any]) -> Any:
        forwards.append(g)
        return aot.eager_compiler(g, ex)

    compiled = aot.aot_module_simplified(
        gm, inputs, fw_compiler, aot.eager_compiler, partition_fn=aot.min_cut_partition,
        decompositions=inductor_lite_table(),
    )
    ours, names = _saved_bytes(forwards[0], 1)
    theirs = _torch_saved(gm, inputs)
    assert 0 < ours <= theirs, (ours, theirs, names)
    params = list(model.parameters())
    loss = compiled(*inputs)[0]
    got = torch.autograd.grad(loss, params)
    want = torch.autograd.grad(loss_fn(x, target), params)
    torch.testing.assert_close(loss, loss_fn(x, target))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_the_compiled_block_step_backward_peaks_below_its_forward() -> None:
    from training_memory_sim import step_timeline

    timeline = step_timeline("transformer_block_train", quick=False)
    forward, backward = timeline.phase_peak["forward"], timeline.phase_peak["backward"]
    # The backward starts from what the forward saved (12 MiB) and adds one MLP activation and
    # its gradient at a time; since the forward's softmax stores over its scores (25d4dd4) the
    # two peaks are level (19.03 and 19.02 MiB), at torch.compile's 19 MiB on the H100 (the
    # simulation leaves out the allocator's rounding). Session 6's order peaked at 21 MiB.
    peak = max(forward, backward)
    assert peak < 19.5 * 2**20, (backward / 2**20, forward / 2**20)
    assert backward < forward + 2**20, (backward / 2**20, forward / 2**20)


def test_recomputed_values_are_computed_where_the_backward_first_needs_them() -> None:
    def f(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(x, (x.shape[-1],))
        return (F.gelu(h @ w1) @ w2).square().mean()

    x = torch.randn(16, 32)
    w1 = torch.randn(32, 64, requires_grad=True)
    w2 = torch.randn(64, 32, requires_grad=True)
    graphs: list[torch.fx.GraphModule] = []

    def bw_compiler(g: torch.fx.GraphModule, ex: Sequence[Any]) -> Any:
        graphs.append(g)
        return aot.eager_compiler(g, ex)

    g = aot.aot_function(f, aot.eager_compiler, bw_compiler, partition_fn=aot.min_cut_partition,
                         decompositions=inductor_lite_table())
    loss = g(x, w1, w2)
    got = torch.autograd.grad(loss, (w1, w2))
    want = torch.autograd.grad(f(x, w1, w2), (w1, w2))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    (bw,) = graphs
    nodes = list(bw.graph.nodes)
    at = {n: k for k, n in enumerate(nodes)}
    dependent = {n for n in nodes if n.name.startswith("tangents")}
    for n in nodes:
        if any(a in dependent for a in n.all_input_nodes):
            dependent.add(n)
    recomputed = [n for n in nodes if n.op == "call_function" and n not in dependent]
    assert any("gelu" in str(n.target) or "erf" in str(n.target) for n in recomputed)
    for n in recomputed:
        # everything between a recomputed value and its first reader is needed by that reader
        first = min(n.users, key=at.__getitem__)
        needed: set[torch.fx.Node] = set()
        stack = [first]
        while stack:
            m = stack.pop()
            if m not in needed:
                needed.add(m)
                stack.extend(m.all_input_nodes)
        assert all(m in needed for m in nodes[at[n]:at[first]]), n.name
