"""Partitioners: what the forward saves for the backward, and min-cut's rematerialisation."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import aot


def _saved_bytes(helpers: Any, target: Any, args: tuple[Any, ...], **options: Any) -> int:
    compiled = (
        aot.aot_module(target, aot.identity_compiler, **options)
        if isinstance(target, torch.nn.Module)
        else aot.aot_function(target, aot.identity_compiler, **options)
    )
    compiled(*args)
    art = compiled.artifacts
    assert art is not None and art.stats is not None
    return int(art.stats.saved_bytes)


CASES = ["mlp", "transformer_block", "cnn_batchnorm_dropout", "pointwise_chain"]


def _case(helpers: Any, name: str) -> tuple[Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    if name == "pointwise_chain":
        return helpers.pointwise_chain, (torch.randn(64, 64, requires_grad=True),)
    make_model, make_input = helpers.MODELS[name]
    return make_model(), (make_input(),)


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "core_decomp"])
@pytest.mark.parametrize("name", CASES)
def test_min_cut_saves_no_more_bytes_than_default(helpers: Any, name: str, decompose: bool) -> None:
    target, args = _case(helpers, name)
    decomps = {"decompositions": aot.core_decompositions()} if decompose else {}
    default = _saved_bytes(helpers, target, args, **decomps)
    min_cut = _saved_bytes(helpers, target, args, partition_fn=aot.min_cut_partition, **decomps)
    assert 0 < min_cut <= default
    if name in ("transformer_block", "pointwise_chain"):
        assert min_cut < default


def test_pointwise_chain_saves_only_its_input(helpers: Any) -> None:
    x = torch.randn(64, 64, requires_grad=True)
    compiled = aot.aot_function(helpers.pointwise_chain, aot.identity_compiler,
                                partition_fn=aot.min_cut_partition)
    out = compiled(x)
    art = compiled.artifacts
    assert art is not None and art.stats is not None
    assert art.stats.saved_names == ("primals_1",)
    assert art.stats.saved_bytes == x.numel() * 4
    (g,) = torch.autograd.grad(out.sum(), x)
    (expected,) = torch.autograd.grad(helpers.pointwise_chain(x).sum(), x)
    helpers.assert_close(g, expected, "grad")


def _joint(fn: Any, *args: Any) -> tuple[torch.fx.GraphModule, int]:
    compiled = aot.aot_function(fn, aot.identity_compiler)
    compiled(*args)
    art = compiled.artifacts
    assert art is not None and art.joint_gm is not None
    return art.joint_gm, len(art.meta.traced)


def test_min_cut_never_recomputes_matmul_or_random_ops() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.dropout(x @ w, p=0.5, training=True)
        return (h.relu() @ w).sum()

    joint, n = _joint(fn, torch.randn(8, 8), torch.randn(8, 8, requires_grad=True))
    fw, bw = aot.min_cut_partition(joint, [], num_fwd_outputs=n)
    bw_ops = {str(node.target) for node in bw.graph.nodes if node.op == "call_function"}
    fw_mm = sum(1 for node in fw.graph.nodes if node.target is torch.ops.aten.mm.default)
    assert fw_mm == 2
    assert "aten.bernoulli.p" not in bw_ops and "aten.bernoulli.default" not in bw_ops
    # Backward matmuls are the gradient ones only (tangent-dependent); none is a forward recompute.
    tangent_free = [
        node for node in bw.graph.nodes
        if node.target is torch.ops.aten.mm.default
        and not any(p.name.startswith("tangents") for p in _inputs_closure(node))
    ]
    assert tangent_free == []


def _inputs_closure(node: torch.fx.Node) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return seen


def test_partitions_split_a_joint_graph_into_graphs_that_recombine() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w).exp()

    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    joint, n = _joint(fn, x, w)
    tangent = torch.randn(4, 5)
    expected = joint(x, w, tangent)
    for partition in (aot.default_partition, aot.min_cut_partition, aot.cpu_partition):
        fw, bw = partition(joint, [], num_fwd_outputs=n)
        fw_out = fw(x, w)
        saved = fw_out[n:]
        grads = bw(*saved, tangent)
        torch.testing.assert_close(fw_out[0], expected[0], rtol=0, atol=0)
        torch.testing.assert_close(grads[0], expected[n], rtol=0, atol=0)


def test_is_recomputable_classifies_ops() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = (x @ w).relu().t()
        return torch.bernoulli(y.sigmoid()).sum(0)

    gm = make_fx(fn)(torch.randn(3, 3), torch.randn(3, 3))
    verdict = {
        str(n.target): aot.is_recomputable(n) for n in gm.graph.nodes if n.op == "call_function"
    }
    assert verdict == {
        "aten.mm.default": False,
        "aten.relu.default": True,
        "aten.t.default": True,
        "aten.sigmoid.default": True,
        "aten.bernoulli.default": False,
        "aten.sum.dim_IntList": False,
    }


@pytest.mark.parametrize(
    "partition", [aot.default_partition, aot.min_cut_partition, aot.cpu_partition]
)
def test_an_unused_random_op_still_draws_in_the_forward(partition: aot.PartitionFn) -> None:
    # eager draws rand_like's numbers though nothing reads them: dropout's mask and the
    # generator state after the call follow from that
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        torch.rand_like(x)
        h = torch.nn.functional.dropout(x * w, p=0.5, training=True)
        torch.randn(3)
        return h

    x, w = torch.ones(16), torch.ones(16, requires_grad=True)
    compiled = aot.aot_function(fn, aot.identity_compiler, partition_fn=partition)
    for _ in range(2):
        torch.manual_seed(3)
        expected, state = fn(x, w), torch.get_rng_state()
        torch.manual_seed(3)
        got = compiled(x, w)
        assert torch.equal(got, expected)
        assert torch.equal(torch.get_rng_state(), state)
    art = compiled.artifacts
    assert art is not None and art.bw_gm is not None
    fw_ops = [str(n.target) for n in art.fw_gm.graph.nodes if n.op == "call_function"]
    assert "aten.rand_like.default" in fw_ops and "aten.randn.default" in fw_ops


def _recomputed(bw: torch.fx.GraphModule) -> list[str]:
    """The ops of a backward graph that no tangent reaches: forward values computed again."""
    dependent = {n for n in bw.graph.nodes if n.op == "placeholder" and "tangents" in n.name}
    for n in bw.graph.nodes:
        if any(a in dependent for a in n.all_input_nodes):
            dependent.add(n)
    return [str(n.target) for n in bw.graph.nodes
            if n.op == "call_function" and n not in dependent]


def test_cpu_partition_saves_what_a_backward_matmul_reads_instead_of_recomputing_it() -> None:
    # h's weight gradient is mm(h.t(), g): recomputing gelu(x @ w1) in the backward would
    # write h again, which saving it avoids; min-cut (bytes only) recomputes it from x @ w1
    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(x @ w1)
        return (h @ w2).sum()

    args = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True), torch.randn(4, 16,
                                                                               requires_grad=True)
    joint, n = _joint(fn, *args)
    _, bw_min_cut = aot.min_cut_partition(joint, [], num_fwd_outputs=n)
    assert "aten.gelu.default" in _recomputed(bw_min_cut)
    fw, bw = aot.cpu_partition(joint, [], num_fwd_outputs=n)
    assert "aten.gelu.default" not in _recomputed(bw)
    assert "gelu" in aot.partition_stats(fw, n).saved_names


def test_cpu_partition_saves_no_view_of_a_computed_value_and_recomputes_fused_pointwise() -> None:
    # y is read through three views (as a q/k/v projection's input is); one tensor is saved
    # and the views are rebuilt in the backward. tanh(y) only feeds pointwise ops: recomputed.
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x * 2
        a, b, c = (y.view(4, 8) @ w[i] for i in range(3))
        return (torch.tanh(y) * y).sum() + (a * b * c).sum()

    args = torch.randn(2, 2, 8), torch.randn(3, 8, 8, requires_grad=True)
    joint, n = _joint(fn, *args)
    fw, bw = aot.cpu_partition(joint, [], num_fwd_outputs=n)
    saved = [node for node in next(iter(reversed(fw.graph.nodes))).args[0][n:]]
    views = [s.name for s in saved if "view" in str(s.target) or "slice" in str(s.target)]
    assert views == []
    _, bw_default = aot.default_partition(joint, [], num_fwd_outputs=n)
    assert aot.partition_stats(fw, n).num_saved < sum(
        1 for p in bw_default.graph.nodes if p.op == "placeholder" and "tangents" not in p.name
    )
    x, w = args
    tangent = torch.ones(())
    expected = joint(x, w, tangent)
    out = fw(x, w)
    grads = bw(*out[n:], tangent)
    torch.testing.assert_close(grads[-1], expected[-1])


def test_arange_is_recomputed_not_saved() -> None:
    # positions built from sizes alone: the backward rebuilds them (index arithmetic in its
    # kernels) instead of taking one more saved tensor from the forward
    def fn(x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[0], dtype=x.dtype)
        return (torch.sin(x * pos[:, None]) * x).sum()

    x = torch.randn(8, 4, requires_grad=True)
    joint, n = _joint(fn, x)
    for partition in (aot.min_cut_partition, aot.cpu_partition):
        fw, bw = partition(joint, [], num_fwd_outputs=n)
        assert not any("arange" in name for name in aot.partition_stats(fw, n).saved_names)
        tangent = torch.ones(())
        torch.testing.assert_close(bw(*fw(x)[n:], tangent)[-1], joint(x, tangent)[-1])
